"""Two shapes of hand-written model tfcheck calls without an adapter (issue 29, class 7): a model with no forward
but encode/decode(/project) methods, called through a composed forward (tfcheck.model.build.composed), and one
whose forward needs a set-up method first (gpt-fast's setup_caches, tfcheck.model.trial.set_up). Both ways: the
rule applies only where its condition holds, and the user's model is left as it was."""
from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn as nn

import tfcheck
from tfcheck.engine.runner import load_subject, settle_facts
from tfcheck.model.build.composed import COMPOSED, composition, own_forward
from tfcheck.model.trial.set_up import SET_UP, set_up_of


class Attention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))

    def forward(self, x, memory, mask=None):
        scores = self.q(x) @ self.k(memory).transpose(-2, -1) / math.sqrt(x.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -1e9)
        return self.o(scores.softmax(-1) @ self.v(memory))


class NoForward(nn.Module):
    """encode / decode / project and no forward, as the from-scratch tutorials write it."""

    def __init__(self, vocab=50, d=16):
        super().__init__()
        self.src_embed, self.tgt_embed = nn.Embedding(vocab, d), nn.Embedding(vocab, d)
        self.enc, self.self_attn, self.cross = Attention(d), Attention(d), Attention(d)
        self.out = nn.Linear(d, vocab)

    def encode(self, src, src_mask):
        x = self.src_embed(src)
        return x + self.enc(x, x, src_mask)

    def decode(self, encoder_output, src_mask, tgt, tgt_mask):
        y = self.tgt_embed(tgt)
        y = y + self.self_attn(y, y, tgt_mask)
        return y + self.cross(y, encoder_output, src_mask)

    def project(self, x):
        return self.out(x)


class OwnForward(NoForward):
    def forward(self, src, tgt):
        return self.decode(self.encode(src, None), None, tgt, None)


def test_a_model_without_forward_gets_the_call_composed_from_its_signatures():
    plan = composition(NoForward())
    assert plan is not None and not own_forward(NoForward())
    assert (plan.encode, plan.memory, plan.decode, plan.project) == (
        ("src", "src_mask"), "encoder_output", ("src_mask", "tgt", "tgt_mask"), "project")
    assert list(plan.signature.parameters) == ["src", "src_mask", "tgt", "tgt_mask"]


def test_a_model_with_its_own_forward_is_called_as_before():
    assert own_forward(OwnForward()) and composition(OwnForward()) is None
    subject = load_subject(OwnForward, {})
    assert type(subject.model) is OwnForward  # no view
    assert subject.source_of(COMPOSED) is None


def test_no_composition_without_a_parameter_that_takes_encodes_output():
    class Unchained(NoForward):
        def decode(self, tgt, tgt_mask):
            return self.tgt_embed(tgt)

    assert composition(Unchained()) is None


def test_the_view_calls_the_users_methods_with_the_users_module_paths():
    model = NoForward().eval()
    subject = load_subject(model, {})
    view = subject.model
    assert view is not model and vars(view) is vars(model) and isinstance(view, NoForward)
    assert [n for n, _ in view.named_modules()] == [n for n, _ in model.named_modules()]
    assert view.state_dict().keys() == model.state_dict().keys()
    src, tgt = torch.randint(0, 50, (2, 5)), torch.randint(0, 50, (2, 4))
    keep, look = torch.ones(2, 1, 5, dtype=torch.bool), torch.ones(4, 4).tril().bool()
    expected = model.project(model.decode(model.encode(src, keep), keep, tgt, look))
    assert torch.equal(view(src, keep, tgt, look), expected)
    assert subject.source_of(COMPOSED) is not None and "no forward() of its own" in subject.source_of(COMPOSED)
    clone = copy.deepcopy(view)  # a training copy: a view of the copy, not of the model
    assert vars(clone) is not vars(model) and torch.equal(clone(src, keep, tgt, look), expected)


def test_the_composed_model_is_checked_and_left_as_it_was():
    model = NoForward()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    attributes, training = dict(vars(model)), model.training
    report = tfcheck.run_checks(model, only=["forward.smoke", "mask.causal", "attention.softmax_axis"]).models[0]
    assert report.result("forward.smoke").status is tfcheck.Status.PASS
    assert report.result("attention.softmax_axis").status is tfcheck.Status.PASS
    assert any(a.key == COMPOSED for a in report.assumptions)
    assert type(model) is NoForward and "forward" not in vars(model) and model.training is training
    assert vars(model).keys() == attributes.keys() and all(vars(model)[k] is v for k, v in attributes.items())
    assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items())


class NeedsCaches(nn.Module):
    """gpt-fast's shape: forward asserts the caches its setup_caches(max_batch_size, max_seq_length) allocates."""

    calls: list = []

    def __init__(self, vocab=50, d=16):
        super().__init__()
        self.embed, self.attn, self.out = nn.Embedding(vocab, d), Attention(d), nn.Linear(d, vocab)
        self.causal_mask = None
        self.max_batch_size = -1

    def setup_caches(self, max_batch_size, max_seq_length):
        type(self).calls.append((max_batch_size, max_seq_length))
        self.max_batch_size = max_batch_size
        self.cache = nn.Module()
        self.cache.register_buffer("k", torch.zeros(max_batch_size, max_seq_length, self.out.in_features))
        self.causal_mask = torch.ones(max_seq_length, max_seq_length, dtype=torch.bool).tril()

    def forward(self, idx, input_pos=None):
        assert self.causal_mask is not None, "Caches must be initialized first"
        x = self.embed(idx)
        self.cache.k[:, input_pos] = x.detach()
        return self.out(x + self.attn(x, x, self.causal_mask[input_pos][:, input_pos]))


class CachesOptional(NeedsCaches):
    def forward(self, idx, input_pos=None):
        x = self.embed(idx)
        mask = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril()
        return self.out(x + self.attn(x, x, mask))


@pytest.mark.parametrize(("method", "params", "found"), [
    ("setup_caches", "max_batch_size, max_seq_length", True),
    ("init_cache", "batch_size, max_len, dtype=None", True),
    ("allocate_kv_caches", "bsz, seq_len", True),
    ("reset_caches", "batch_size, dtype", False),  # a required parameter that is no size: nothing to give it
    ("setup", "max_batch_size, max_seq_length", False),  # not named as a cache's set-up
    ("setup_caches", "a, b", False),  # no batch size and length by name
])
def test_a_set_up_method_is_read_by_its_name_and_its_size_parameters(method, params, found):
    namespace: dict = {}
    exec(f"def {method}(self, {params}): pass", namespace)  # noqa: S102 - a method of the signature under test
    cls = type("Model", (nn.Module,), {method: namespace[method], "forward": lambda self, idx, input_pos=None: idx})
    assert (set_up_of(cls()) is not None) is found


def test_a_set_up_method_is_called_only_after_the_forward_raised():
    NeedsCaches.calls = []
    subject = load_subject(CachesOptional, {})
    assert settle_facts(subject).ran
    assert NeedsCaches.calls == [] and subject.source_of(SET_UP) is None


def test_a_forward_that_needs_its_caches_runs_after_the_set_up_and_the_model_is_left_as_it_was():
    NeedsCaches.calls = []
    model = NeedsCaches()
    attributes = dict(vars(model))
    modules, keys = dict(model._modules), set(model.state_dict())
    report = tfcheck.run_checks(model, only=["forward.smoke", "mask.causal", "batch.independence"]).models[0]
    for check in ("forward.smoke", "mask.causal", "batch.independence"):
        assert report.result(check).status is tfcheck.Status.PASS, check
    setup = next(a for a in report.assumptions if a.key == SET_UP)
    assert "AssertionError: Caches must be initialized first" in setup.source and "input_pos" in setup.source
    assert len({batch for batch, _ in NeedsCaches.calls}) > 1  # each forward's own batch, not one size for all
    assert model.causal_mask is None and model.max_batch_size == -1 and "cache" not in model._modules
    assert vars(model).keys() == attributes.keys() and dict(model._modules) == modules
    assert set(model.state_dict()) == keys


def test_a_set_up_that_does_not_help_leaves_the_first_error():
    class StillBroken(NeedsCaches):
        def forward(self, idx, input_pos=None):
            raise ValueError("broken for another reason")

    subject = load_subject(StillBroken, {})
    trial = settle_facts(subject)
    assert not trial.ran and "broken for another reason" in str(trial.error)
    assert subject.source_of(SET_UP) is None and type(subject.model) is StillBroken
