"""Causality read from a model's source (tfcheck.model.facts.causal_source), both ways: each sign of a decoder is
found where it is written, a switch its submodules keep decides, a switch nobody keeps and a decoder elsewhere in
the file leave it unknown, and a source with no sign is silent. Each model is written to its own file, since the
reading covers the whole file."""
from __future__ import annotations

import textwrap

import pytest

import tfcheck
from tfcheck import Status
from tfcheck.model.build.spec import load
from tfcheck.model.facts.causal_source import causal_source

HEADER = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Mixer(nn.Module):
    def __init__(self, d=16, causal=False):
        super().__init__()
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)

    def attend(self, x, **kw):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return self.out(F.scaled_dot_product_attention(q, k, v, **kw))
"""

BODIES = {
    "is_causal": ("def forward(self, x):\n    return self.attend(x, is_causal=True)", True, "is_causal=True"),
    "triangle": ("def forward(self, x):\n    n = x.size(1)\n"
                 "    return self.attend(x, attn_mask=torch.ones(n, n, dtype=torch.bool).tril())", True, "tril()"),
    "switch read": ("def forward(self, x, causal=False):\n    return self.attend(x, is_causal=causal)", None,
                    "causal switch"),
    "silent": ("def forward(self, x):\n    return self.attend(x)", None, "no sign of a decoder"),
}


def _model(tmp_path, body: str, extra: str = "", name: str = "m"):
    path = tmp_path / f"{name}.py"
    path.write_text(HEADER + extra + "\n\nclass Model(Mixer):\n" + textwrap.indent(body, "    ") + "\n")
    return load(f"{path}:Model").model


@pytest.mark.parametrize("case", BODIES)
def test_each_sign_is_read_where_it_is_written(tmp_path, case):
    body, causal, said = BODIES[case]
    read = causal_source(_model(tmp_path, body, name=case.replace(" ", "_")))
    assert read.causal is causal and said in read.where, read
    assert read.silent is (case == "silent")
    if causal:
        assert f"{case.replace(' ', '_')}.py:" in read.where  # the file and line of the sign


def test_a_next_token_loss_is_a_sign_of_a_decoder(tmp_path):
    body = ("def forward(self, x, labels):\n    logits = self.attend(x)\n"
            "    return F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten())")
    read = causal_source(_model(tmp_path, body))
    assert read.causal is True and "next-token loss" in read.where, read


def test_a_context_length_in_the_constructor_is_a_sign_of_a_decoder(tmp_path):
    body = ("def __init__(self, d=16, block_size=64):\n    super().__init__(d)\n"
            "def forward(self, x):\n    return self.attend(x)")
    read = causal_source(_model(tmp_path, body))
    assert read.causal is True and "block_size" in read.where, read


def test_a_switch_the_submodules_keep_decides_and_disagreeing_ones_do_not(tmp_path):
    body = "def forward(self, x):\n    return self.attend(x, is_causal=self.causal)"
    model = _model(tmp_path, body)
    model.causal = False
    assert causal_source(model).causal is False
    model.causal = True
    assert causal_source(model).causal is True
    model.qkv.causal = False  # an encoder-decoder's two sides
    assert causal_source(model).causal is None


def test_a_decoder_elsewhere_in_the_file_leaves_an_encoder_unknown_not_silent(tmp_path):
    decoder = "\n\nclass Decoder(Mixer):\n    def forward(self, x):\n        return self.attend(x, is_causal=True)\n"
    read = causal_source(_model(tmp_path, BODIES["silent"][0], extra=decoder))
    assert read.causal is None and not read.silent and "their file does" in read.where, read


TOKEN_MODEL = HEADER + """

class Model(nn.Module):
    def __init__(self, vocab=50, d=16{extra}):
        super().__init__()
        self.emb, self.mix, self.head = nn.Embedding(vocab, d), Mixer(d), nn.Linear(d, vocab)

    def forward(self, idx):
        return self.head(self.mix.attend(self.emb(idx)))
"""


@pytest.mark.parametrize(("extra", "read_as", "status"), [("", False, None), (", block_size=64", True, Status.FAIL)])
def test_a_silent_encoder_is_bidirectional_and_its_maskless_decoder_twin_fails(tmp_path, extra, read_as, status):
    path = tmp_path / f"token_model_{bool(extra)}.py"
    path.write_text(TOKEN_MODEL.format(extra=extra))
    report = tfcheck.run_checks(f"{path}:Model", only=["mask.causal"]).models[0]
    causal = next(a for a in report.assumptions if a.key == "causal")
    assert causal.value is read_as, report
    if status is None:  # not applicable, said among the assumptions: no "kind unknown" warning
        assert "mask.causal" not in {r.check for r in report.results}, report
        assert "built no look-ahead mask" in causal.source, causal
    else:
        assert report.result("mask.causal").status is status, report


def test_torch_modules_alone_have_no_source_of_their_own():
    import torch.nn as nn

    read = causal_source(nn.TransformerEncoderLayer(16, 2))
    assert read.causal is None and not read.silent and "torch's" in read.where
