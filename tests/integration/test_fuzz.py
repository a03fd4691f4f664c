"""Fuzzing: many models, random sizes and forward conventions, defects from the test zoo and the broken
gallery, forwards that raise or return junk, budgets that cut checks off anywhere. Whatever comes,
tfcheck never raises (bad input is a UsageError with a message), reports a status for every check that
applies, and leaves the model as it was."""
from __future__ import annotations

import importlib
import inspect

import pytest
import torch
import torch.nn as nn
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import tfcheck
from model_state import assert_same, snapshot
from reference_model import Seq2SeqTransformer, TransformerEncoder, TransformerLM, broken
from tfcheck import Status
from tfcheck.engine.runner import applicable_checks, load_subject, may_apply_after_trial

FUZZ = settings(max_examples=25, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

OUTPUTS = ["tensor", "tensor", "tensor", "tuple", "dict", "object", "none", "string", "scalar", "nested_junk"]
CONVENTIONS = ["input_ids", "with_mask", "nanogpt", "varargs", "features"]


#: The zoo models tfcheck refuses to build, and what its UsageError must say: a constructor argument it cannot
#: guess, a constructor that raises on purpose. They are the only ones left out of the fuzz.
REFUSED = {
    "zoo:NeedsUnknownArgument": "needs argument(s) tokenizer_path that tfcheck cannot guess",
    "zoo:ConstructorRaises": "raised ValueError: d_model must be divisible by num_heads",
}


def _spec(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _zoo_classes() -> list[type]:
    """Every model class of the test zoo, the broken gallery, the reference models (none constructed here)."""
    found: list[type] = [TransformerEncoder, TransformerLM, Seq2SeqTransformer, *broken.VARIANTS]
    for name in ("zoo", "zoo_flow", "zoo_heads", "zoo_masks", "zoo_numerics", "zoo_training", "zoo_causal_patterns",
                 "zoo_noise", "zoo_limitations", "zoo_mask_constants"):
        module = importlib.import_module(name)
        for attr, value in sorted(vars(module).items()):
            if attr.startswith("_") or not (inspect.isclass(value) and issubclass(value, nn.Module)) \
                    or value.__module__ != name:
                continue
            found.append(value)
    return found


def _needs_arguments(cls: type) -> bool:
    return any(p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
               for p in inspect.signature(cls).parameters.values())


def build(cls: type) -> nn.Module:
    """An instance with the same weights every run (the suite's generator untouched): cls(), or, when the
    constructor needs arguments, the instance tfcheck builds with the hyper-parameters it fills in. Any
    error propagates: a zoo model that does not build fails the fuzz instead of leaving it."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return load_subject(cls, {}).model if _needs_arguments(cls) else cls()


ZOO_CLASSES = _zoo_classes()
assert set(REFUSED) <= {_spec(c) for c in ZOO_CLASSES}, "REFUSED names a model the zoo no longer has"
ZOO = [c for c in ZOO_CLASSES if _spec(c) not in REFUSED]


def _shaped(output: torch.Tensor, style: str):
    return {
        "tensor": lambda: output,
        "tuple": lambda: (output, None),
        "dict": lambda: {"logits": output, "extra": 3},
        "object": lambda: type("Out", (), {"logits": output})(),
        "none": lambda: None,
        "string": lambda: "not a tensor",
        "scalar": lambda: output.sum(),
        "nested_junk": lambda: [[{"a": "b"}]],
    }[style]()


class RandomTransformer(nn.Module):
    """A small Transformer of random sizes whose forward convention, output and failure the fuzzer picks."""

    def __init__(self, vocab, width, heads, layers, dropout, convention, output, raise_on_call, kind):
        super().__init__()
        self.convention, self.output, self.raise_on_call, self.calls = convention, output, raise_on_call, 0
        self.causal = kind == "decoder"
        if convention != "features":
            self.embed = nn.Embedding(vocab, width)
        layer = nn.TransformerEncoderLayer(width, heads, 2 * width, dropout, batch_first=True)
        self.body = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, vocab)
        if kind is not None:
            self.__tfcheck__ = {"kind": kind}

    def _run(self, x, keep=None):
        self.calls += 1
        if self.raise_on_call is not None and self.calls >= self.raise_on_call:
            raise RuntimeError("fuzzed failure deep in the model")
        h = x if self.convention == "features" else self.embed(x)
        s = h.shape[1]
        # True above the diagonal: may not attend.
        mask = torch.ones(s, s, dtype=torch.bool, device=h.device).triu(1) if self.causal else None
        pad = None if keep is None else ~keep.bool()
        return self.head(self.body(h, mask=mask, src_key_padding_mask=pad, is_causal=self.causal))

    def forward(self, *args, **kwargs):
        if self.convention == "with_mask":
            return _shaped(self._run(args[0], kwargs.get("attention_mask")), self.output)
        if self.convention == "nanogpt":
            logits = self._run(args[0])
            targets = kwargs.get("targets")
            loss = None if targets is None else nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
            return _shaped(logits, self.output) if self.output != "tensor" else (logits, loss)
        return _shaped(self._run(args[0]), self.output)


def _signature(convention: str) -> inspect.Signature:
    P = inspect.Parameter
    params = {
        "input_ids": [P("input_ids", P.POSITIONAL_OR_KEYWORD)],
        "with_mask": [P("input_ids", P.POSITIONAL_OR_KEYWORD),
                      P("attention_mask", P.POSITIONAL_OR_KEYWORD, default=None)],
        "nanogpt": [P("idx", P.POSITIONAL_OR_KEYWORD), P("targets", P.POSITIONAL_OR_KEYWORD, default=None)],
        "varargs": [P("args", P.VAR_POSITIONAL)],
        "features": [P("x", P.POSITIONAL_OR_KEYWORD)],
    }[convention]
    return inspect.Signature(params)


def random_model(vocab, width, heads, layers, dropout, convention, output, raise_on_call, kind) -> nn.Module:
    model = RandomTransformer(vocab, width, heads, layers, dropout, convention, output, raise_on_call, kind)
    # The forward convention is what tfcheck reads off the signature: give this instance's forward that one.
    forward = model.forward

    def conventional(*args, **kwargs):
        return forward(*args, **kwargs)

    conventional.__signature__ = _signature(convention)
    model.forward = conventional
    return model


class Strange(nn.Module):
    """A zoo model behind a wrapper that returns junk or raises on its k-th call."""

    def __init__(self, inner: nn.Module, output: str, raise_on_call: int | None):
        super().__init__()
        self.inner, self.output, self.raise_on_call, self.calls = inner, output, raise_on_call, 0
        declared = getattr(inner, "__tfcheck__", None)
        if isinstance(declared, dict):
            self.__tfcheck__ = dict(declared)
        self.max_len = getattr(inner, "max_len", None) or getattr(inner, "block_size", None) or 64
        forward = self._forward

        def conventional(*args, **kwargs):  # the inner model's signature, read by tfcheck
            return forward(*args, **kwargs)

        conventional.__signature__ = inspect.signature(inner.forward)
        self.forward = conventional

    def _forward(self, *args, **kwargs):
        self.calls += 1
        if self.raise_on_call is not None and self.calls >= self.raise_on_call:
            raise ValueError("fuzzed failure in a wrapper")
        out = self.inner(*args, **kwargs)
        return out if self.output == "tensor" or not isinstance(out, torch.Tensor) else _shaped(out, self.output)


def check_the_battery(model: nn.Module, **declared) -> None:
    """The fuzz property: no exception but a UsageError, every applicable check reported with a status, no
    tfcheck error, the model as it was."""
    for p in list(model.parameters())[:1]:
        p.grad = torch.full_like(p, 0.25)
    before = snapshot(model)
    try:
        report = tfcheck.run_checks(model, **declared)
    except tfcheck.UsageError as exc:  # bad input is a usage error with a message, never a crash
        assert str(exc)
        assert_same(before, snapshot(model))
        return
    assert_same(before, snapshot(model))
    results = {r.check: r for r in report.models[0].results}
    declared_again = tfcheck.model.facts.declarations.from_mapping(declared, "fuzz")
    subject = load_subject(model, declared_again)
    before_trial = applicable_checks(subject)
    # Every check that applies is reported, and at most those a fact the trial forward settles made apply.
    stated = {a.value for a in report.models[0].assumptions if a.key == "not applicable"}
    assert {c.id for c in before_trial} <= set(results) | stated  # or found not applicable once it ran
    assert set(results) <= {c.id for c in before_trial + may_apply_after_trial(subject, before_trial)}
    for r in results.values():
        assert r.findings and all(f.status in Status and f.message for f in r.findings), r
        assert all(f.status is not Status.ERROR for f in r.findings), r.findings


@FUZZ
@given(vocab=st.integers(5, 60), width=st.sampled_from([4, 8, 12, 16]), heads=st.sampled_from([1, 2, 4]),
       layers=st.integers(1, 2), dropout=st.sampled_from([0.0, 0.1]), convention=st.sampled_from(CONVENTIONS),
       output=st.sampled_from(OUTPUTS), raise_on_call=st.one_of(st.none(), st.none(), st.integers(1, 40)),
       kind=st.sampled_from([None, "encoder", "decoder"]), budget_s=st.sampled_from([None, None, 0.005, 0.02, 0.05]))
def test_random_transformers_never_break_tfcheck(vocab, width, heads, layers, dropout, convention, output,
                                                 raise_on_call, kind, budget_s):
    if width % heads:
        heads = 1
    model = random_model(vocab, width, heads, layers, dropout, convention, output, raise_on_call, kind)
    declared = {"budget_s": budget_s} if budget_s is not None else {}
    if convention == "features":
        declared["d_model"] = width
    check_the_battery(model, **declared)


@FUZZ
@given(cls=st.sampled_from(ZOO), output=st.sampled_from(OUTPUTS),
       raise_on_call=st.one_of(st.none(), st.integers(1, 40)),
       wrapped=st.booleans(), budget_s=st.sampled_from([None, None, 0.005, 0.02, 0.05]))
# found by the fuzz: embedding.padding indexed the samples of a scalar output
@example(cls=next(c for c in ZOO if _spec(c) == "zoo_masks:ConstantOutput"), output="scalar", raise_on_call=None,
         wrapped=True, budget_s=None)
def test_zoo_models_and_their_strange_wrappers_never_break_tfcheck(cls, output, raise_on_call, wrapped, budget_s):
    inner = build(cls)
    model = Strange(inner, output, raise_on_call) if wrapped else inner
    check_the_battery(model, **({"budget_s": budget_s} if budget_s is not None else {}))


@pytest.mark.parametrize("cls", ZOO, ids=_spec)
def test_every_fuzzed_zoo_model_builds(cls):
    """The fuzz draws a few of these; each one must build, or it would fail only when drawn."""
    assert isinstance(build(cls), nn.Module)


@pytest.mark.parametrize("spec", sorted(REFUSED))
def test_the_zoo_models_left_out_of_the_fuzz_are_refused_with_a_clear_message(spec):
    cls = next(c for c in ZOO_CLASSES if _spec(c) == spec)
    with pytest.raises(tfcheck.UsageError) as refused:
        load_subject(cls, {})
    message = str(refused.value)
    assert REFUSED[spec] in message and "'kwargs' declaration" in message, message


# ----- hostile forwards: what a model may do to itself and to the process while tfcheck runs it -------------

def _exit(m: nn.Module) -> None:
    raise SystemExit(0)


def _reassign_buffer(m: nn.Module) -> None:
    m.step = m.step + 1  # a registered buffer replaced by a new tensor


def _new_parameter(m: nn.Module) -> None:
    m.head.bias = nn.Parameter(torch.zeros_like(m.head.bias))


def _swap_data(m: nn.Module) -> None:
    m.head.weight.data = m.head.weight.data.clone() * 0.5  # new storage behind the same parameter


def _add_module(m: nn.Module) -> None:
    m.extra = nn.Linear(2, 2)


def _delete_module(m: nn.Module) -> None:
    if hasattr(m, "spare"):
        del m.spare


def _global_hook(m: nn.Module) -> None:
    nn.modules.module.register_module_forward_hook(lambda *a: None)


def _tensor_hook(m: nn.Module) -> None:
    m.head.weight.register_hook(lambda g: g)


def _state_dict_hook(m: nn.Module) -> None:
    m._register_state_dict_hook(lambda *a: None)


def _process_state(m: nn.Module) -> None:
    import os
    import sys
    import warnings

    torch.set_default_dtype(torch.float64)
    torch.set_default_dtype(torch.float32)  # left changed by the next act below: what a model leaves, restored
    warnings.simplefilter("ignore")
    sys.path.append("/nonexistent-added-by-a-hostile-forward")
    os.chdir(os.path.dirname(os.getcwd()) or "/")
    torch.set_float32_matmul_precision("medium")


ACTS = {f.__name__.lstrip("_"): f for f in (_exit, _reassign_buffer, _new_parameter, _swap_data, _add_module,
                                           _delete_module, _global_hook, _tensor_hook, _state_dict_hook,
                                           _process_state)}


class Hostile(nn.Module):
    """A small LM whose forward does the hostile acts it is given, from its k-th call on."""

    def __init__(self, acts: tuple[str, ...], from_call: int, lazy: bool):
        super().__init__()
        self.acts, self.from_call, self.calls = acts, from_call, 0
        self.embed = nn.Embedding(23, 8)
        self.body = nn.LazyLinear(8) if lazy else nn.Linear(8, 8)
        self.spare = nn.Linear(2, 2)
        self.head = nn.Linear(8, 23)
        self.register_buffer("step", torch.zeros(()))

    def forward(self, input_ids):
        self.calls += 1
        if self.calls >= self.from_call:
            for act in self.acts:
                ACTS[act](self)
        return self.head(torch.relu(self.body(self.embed(input_ids))))


def built_on_meta() -> nn.Module:
    with torch.device("meta"):
        return Hostile((), 1, lazy=False)


@FUZZ
@given(acts=st.lists(st.sampled_from(sorted(ACTS)), min_size=1, max_size=3, unique=True).map(tuple),
       from_call=st.integers(1, 30), lazy=st.booleans(), kind=st.sampled_from([None, "decoder"]))
def test_hostile_forwards_never_break_tfcheck_and_everything_is_put_back(acts, from_call, lazy, kind):
    """sys.exit in forward, state reassigned or swapped, modules added and deleted, global, tensor and state-dict
    hooks, process settings changed, lazy parameters: a finding or a usage error, never a crash, and the model and
    the process exactly as before."""
    model = Hostile(acts, from_call, lazy)
    declared = {"kind": kind} if kind else {}
    if lazy:  # refused before any forward: its parameters have no size yet (and no state to compare)
        with pytest.raises(tfcheck.UsageError, match="lazy|Lazy"):
            tfcheck.run_checks(model, **declared)
        assert nn.parameter.is_lazy(model.body.weight) and model.calls == 0
        return
    check_the_battery(model, **declared)


def test_a_factory_that_builds_on_meta_is_a_usage_error_not_a_crash():
    with pytest.raises(tfcheck.UsageError, match="meta device"):
        tfcheck.run_checks(built_on_meta)
