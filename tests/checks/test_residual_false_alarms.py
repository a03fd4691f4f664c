"""shape.residual false alarms on real implementations (issue 15), fixed at their cause, and the look-alike bugs that
still warn: a sublayer fed a token shift of the stream written inline (simple-hierarchical-transformer's
``x = self.ff(token_shift(x)) + x``: chunk, pad and cat in the block's own forward) sits inside its residual; the same
sublayer with nothing added back does not. A mixture of experts' router (a softmax over a Linear's output, whose
weights scale the experts) is no attention that needs a residual of its own (17 Hugging Face MoE classes warned
"no residual path around the attention in 'mlp.router'"); an attention with nothing added back still warns. A residual
kept in an exact copy of the block's input (Megatron-LM's and litgpt's ``residual = x.clone()`` ... ``x = residual +
x``) is the residual of that input; a copy never added back, a detached skip, a flipped one or a copy written over
in place still warns."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import tfcheck
import zoo_training as zt
from tfcheck import Status

RESIDUAL = "shape.residual"
VOCAB, D = 50, 16


def token_shift(x):
    """Half the channels moved one position later, as RWKV-style token shifts are written."""
    kept, shifted = x.chunk(2, dim=-1)
    return torch.cat((kept, F.pad(shifted, (0, 0, 1, -1))), dim=-1)


class TokenShiftLM(nn.Module):
    __tfcheck__ = {"kind": "decoder", "d_model": D}

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, D)
        self.ff = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))
        self.head = nn.Linear(D, VOCAB)

    def block(self, x):
        return self.ff(token_shift(x)) + x

    def forward(self, ids):
        return self.head(self.block(self.emb(ids)))


class TokenShiftWithoutResidual(TokenShiftLM):
    def block(self, x):
        return self.ff(token_shift(x))


def _residual(model):
    return tfcheck.run_checks(model, only=[RESIDUAL]).models[0].result(RESIDUAL)


def test_a_sublayer_fed_an_inline_token_shift_of_the_stream_is_inside_its_residual():
    result = _residual(TokenShiftLM)
    assert result.status is Status.PASS, str(result)
    assert "ff" in result.findings[0].message


def test_the_same_sublayer_with_nothing_added_back_still_warns():
    result = _residual(TokenShiftWithoutResidual)
    assert result.status is Status.WARN, str(result)
    assert [f.row for f in result.findings] == ["residual-missing"]
    assert "'ff.2'" in result.findings[0].message


class SelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(D, D), nn.Linear(D, D), nn.Linear(D, D)

    def forward(self, x):
        scores = self.q(x) @ self.k(x).transpose(-2, -1) / D ** 0.5
        return torch.softmax(scores, dim=-1) @ self.v(x)


class Router(nn.Module):
    def __init__(self, experts: int = 2):
        super().__init__()
        self.gate = nn.Parameter(torch.randn(experts, D) * 0.1)

    def forward(self, x):
        return torch.softmax(x @ self.gate.t(), dim=-1)  # routing weights: a projection's output, softmaxed


class MoELM(TokenShiftLM):
    def __init__(self):
        super().__init__()
        self.attn = SelfAttention()
        self.router = Router()
        self.experts = nn.ModuleList([nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))
                                      for _ in range(2)])

    def block(self, x):
        """An attention, then each token to its top expert, accumulated in place into a zero tensor, as Hugging
        Face's MoE blocks do."""
        x = x + self.attn(x)
        weight, chosen = self.router(x).reshape(-1, 2).topk(1, dim=-1)
        tokens, out = x.reshape(-1, D), torch.zeros_like(x).reshape(-1, D)
        for e, expert in enumerate(self.experts):
            rows = (chosen.squeeze(-1) == e).nonzero().squeeze(-1)
            out.index_add_(0, rows, expert(tokens[rows]) * weight[rows])
        return x + out.reshape(x.shape)


class AttentionWithoutResidual(TokenShiftLM):
    def __init__(self):
        super().__init__()
        self.attn = SelfAttention()

    def block(self, x):
        h = self.attn(x)  # the attention's output replaces the stream
        return self.ff(h) + h


def test_a_mixture_of_experts_router_is_no_attention_that_needs_a_residual():
    result = _residual(MoELM)
    assert result.status is Status.PASS, str(result)


def test_an_attention_with_nothing_added_back_still_warns():
    result = _residual(AttentionWithoutResidual)
    assert result.status is Status.WARN and [f.evidence["sublayer"] for f in result.findings] == ["attention"], \
        str(result)


@pytest.mark.parametrize("copy", ["clone", "view", "expand_as", "times_one", "clone_of_reshape"])
@pytest.mark.parametrize("pre_ln", [True, False], ids=["pre-ln", "post-ln"])
def test_a_residual_kept_in_an_exact_copy_of_the_input_is_that_inputs_residual(copy, pre_ln):
    result = _residual(lambda: zt.CopiedResidualLM(copy, pre_ln=pre_ln))
    assert result.status is Status.PASS, str(result)
    assert len(result.findings[0].evidence["residuals"]) == 4  # attention and feed-forward, in both blocks


@pytest.mark.parametrize("copy", ["clone", "view"])
def test_a_copy_of_the_input_never_added_back_still_warns(copy):
    result = _residual(lambda: zt.CopiedResidualLM(copy, add_back=False))
    assert result.status is Status.WARN, str(result)
    assert {f.row for f in result.findings} == {"residual-missing"}
    assert sorted(f.location.module for f in result.findings) == ["attn.0", "attn.1", "ffn.0.2", "ffn.1.2"]


@pytest.mark.parametrize("copy", ["detach", "flip", "overwritten"])
def test_a_skip_that_is_no_exact_copy_of_the_input_still_warns(copy):
    """The same values without a gradient path (detach), the same shape with the positions moved (flip), a copy
    zeroed in place before the add: none carries the input around the sublayer."""
    result = _residual(lambda: zt.CopiedResidualLM(copy))
    assert result.status is Status.WARN, str(result)
    assert {f.evidence["sublayer"] for f in result.findings} == {"attention", "feed-forward"}
