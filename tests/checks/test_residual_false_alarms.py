"""shape.residual false alarms on real implementations (issue 15), fixed at their cause, and the look-alike bug that
still warns: a sublayer fed a token shift of the stream written inline (simple-hierarchical-transformer's
``x = self.ff(token_shift(x)) + x``: chunk, pad and cat in the block's own forward) sits inside its residual; the same
sublayer with nothing added back does not."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

import tfcheck
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
