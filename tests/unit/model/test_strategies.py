"""tfcheck.strategies: the public hypothesis strategies keep tfcheck's conventions (keep mask True = real, a real
token in every sample, real ids never the pad id) and shrink to the simplest input."""
from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

import tfcheck
from helpers import nn_encoder, nn_transformer
from tfcheck import strategies as tst

FAST = settings(max_examples=40, deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])
FIND = settings(max_examples=200, database=None, derandomize=True)


@FAST
@given(st.data())
def test_padding_patterns_keep_a_real_token_and_respect_the_side(data):
    n = data.draw(st.integers(1, 12))
    pattern = data.draw(tst.padding_patterns(n))
    assert len(pattern) == n and any(pattern)
    right = data.draw(tst.padding_patterns(n, side="right"))
    assert right == tuple(sorted(right, reverse=True))  # real tokens first, then pads
    left = data.draw(tst.padding_patterns(n, side="left"))
    assert left == tuple(sorted(left))
    if n > 1:
        assert data.draw(tst.padding_patterns(n, min_pads=n - 1)).count(False) == n - 1


def test_padding_shrinks_to_one_pad_at_the_end():
    assert find(tst.padding_patterns(6), lambda p: not all(p), settings=FIND) == (True,) * 5 + (False,)
    assert find(tst.padding_patterns(6, side="left"), lambda p: not all(p), settings=FIND) == (False,) + (True,) * 5
    # a pad that must come before a real token: one, at the start
    assert find(tst.padding_patterns(4), lambda p: not p[0], settings=FIND) == (False, True, True, True)


def test_sizes_shrink_to_their_minimum():
    assert find(tst.batch_sizes(1, 4), lambda b: True, settings=FIND) == 1
    assert find(tst.lengths(3, 9), lambda n: n > 4, settings=FIND) == 5
    assert find(tst.seeds(), lambda s: True, settings=FIND) == 0


@FAST
@given(st.data())
def test_token_ids_never_draw_the_pad_id_and_pads_hold_it(data):
    vocab = data.draw(st.integers(2, 9))
    pad_id = data.draw(st.integers(0, vocab - 1))
    keep = data.draw(tst.padding_masks(3, 5))
    tokens = data.draw(tst.token_ids(3, 5, vocab, pad_id=pad_id, keep=keep))
    assert tokens.dtype == torch.long and tuple(tokens.shape) == (3, 5)
    assert bool((tokens[keep] != pad_id).all()) and bool((tokens[~keep] == pad_id).all())
    assert int(tokens.min()) >= 0 and int(tokens.max()) < vocab


def test_token_ids_shrink_to_the_smallest_real_id():
    assert find(tst.token_ids(1, 2, 10, pad_id=0), lambda t: True, settings=FIND).tolist() == [[1, 1]]
    assert find(tst.token_ids(1, 2, 10), lambda t: True, settings=FIND).tolist() == [[0, 0]]


@FAST
@given(tst.padded_batches(vocab_size=11, pad_id=3, max_batch=3, max_len=6, min_pads=1))
def test_padded_batches_are_consistent(batch):
    assert batch.tokens.shape == batch.keep.shape and 1 <= batch.batch <= 3 and 2 <= batch.length <= 6
    assert bool((batch.keep.sum(1) >= 1).all()) and bool(((~batch.keep).sum(1) >= 1).all())
    assert bool((batch.tokens[~batch.keep] == 3).all()) and bool((batch.tokens[batch.keep] != 3).all())


@pytest.mark.parametrize("call,needle", [
    (lambda: tst.padding_patterns(4, side="top"), "side is one of any, right, left"),
    (lambda: tst.padding_patterns(3, min_pads=3), "at most 2 pads fit"),
    (lambda: tst.lengths(0, 4), "need 1 <= min_len"),
    (lambda: tst.batch_sizes(3, 2), "need 1 <= min_batch <= max_batch"),
    (lambda: tst.token_ids(1, 2, 5, pad_id=5), "pad_id must be an id of the vocabulary"),
    (lambda: tst.token_ids(1, 2, 5, keep=torch.tensor([[True, False]])), "give pad_id"),
])
def test_bad_arguments_say_what_to_give(call, needle):
    with pytest.raises(tfcheck.UsageError, match=needle):
        call()


def _draw_all(strategy, count=12):
    seen = []

    @settings(max_examples=count, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(value):
        seen.append(value)

    collect()
    return seen


def _padded_and_unpadded(drawn):
    padded = [i for i in drawn if not bool(i.keep.all())]
    unpadded = [i for i in drawn if bool(i.keep.all())]
    assert padded and unpadded, "the draws must exercise both a padded and an unpadded batch"
    return padded, unpadded


def test_model_inputs_use_the_models_own_mask_convention():
    padded, unpadded = _padded_and_unpadded(
        _draw_all(tst.model_inputs("zoo_masks:HFLikeEncoder", max_batch=2, max_len=5)))
    for inputs in padded:
        assert torch.equal(inputs.kwargs["attention_mask"], inputs.keep.long())  # 1 = real token
    for inputs in unpadded:  # no pads: the mask argument is left to its default (every position real)
        assert "attention_mask" not in inputs.kwargs, inputs.kwargs
    padded, unpadded = _padded_and_unpadded(_draw_all(tst.model_inputs(nn_encoder(), max_batch=2, max_len=5)))
    for inputs in padded + unpadded:
        assert inputs.args[0].is_floating_point()  # no embedding: features
    for inputs in padded:
        assert torch.equal(inputs.kwargs["src_key_padding_mask"], ~inputs.keep)  # True = pad
    for inputs in unpadded:
        assert "src_key_padding_mask" not in inputs.kwargs, inputs.kwargs


def test_model_inputs_put_pad_ids_where_the_model_builds_its_mask():
    for inputs in _draw_all(tst.model_inputs("reference_model:TransformerEncoder", max_len=6)):
        assert inputs.kwargs == {} and bool((inputs.tokens[~inputs.keep] == 0).all())
        assert bool((inputs.tokens[inputs.keep] != 0).all())


def test_model_inputs_of_a_seq2seq_model_carry_a_target_and_run():
    model = nn_transformer().eval()
    for inputs in _draw_all(tst.model_inputs(model, max_batch=2, max_len=4), count=5):
        assert inputs.target is not None
        with torch.no_grad():
            out = model(*inputs.args, **inputs.kwargs)
        assert out.shape[:2] == inputs.target.shape[:2]


def test_model_inputs_without_padding_are_all_real():
    for inputs in _draw_all(tst.model_inputs("reference_model:TransformerLM", padding=False, max_len=5)):
        assert bool(inputs.keep.all())


def test_model_inputs_refuse_what_tfcheck_does_not_build():
    def factory(batch, length):
        return (torch.zeros(batch, length, 4),), {}

    with pytest.raises(tfcheck.UsageError, match="draw its inputs with your own strategy"):
        tst.model_inputs(nn_encoder(), inputs=factory, d_model=32)
