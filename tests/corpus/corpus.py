"""The corpus: real Transformer implementations installed from PyPI (the `corpus` extra), each with its natural
spec, and what a zero-config run of the battery on it is allowed to report. tests/corpus/test_corpus.py holds the
runs to these tables, and benchmarks/corpus_page.py writes docs/models/corpus.md from a run of them."""
from __future__ import annotations

from dataclasses import dataclass, field
from importlib import metadata
from typing import Any


@dataclass(frozen=True)
class Member:
    package: str  # the distribution, as pinned in the corpus extra
    module: str  # what importorskip needs
    spec: str
    declared: dict[str, Any] = field(default_factory=dict)  # only what its docs page says it irreducibly needs

    @property
    def version(self) -> str | None:
        try:
            return metadata.version(self.package)
        except metadata.PackageNotFoundError:
            return None


CORPUS: dict[str, Member] = {
    "x-transformers-decoder": Member("x-transformers", "x_transformers", "corpus_models:x_decoder"),
    "x-transformers-encoder": Member("x-transformers", "x_transformers", "corpus_models:x_encoder"),
    "local-attention": Member("local-attention", "local_attention", "local_attention:LocalTransformer"),
    "palm": Member("palm-rlhf-pytorch", "palm_rlhf_pytorch", "palm_rlhf_pytorch:PaLM"),
    "perceiver-lm": Member("perceiver-pytorch", "perceiver_pytorch", "corpus_models:perceiver_lm"),
    "linear-attention": Member("linear-attention-transformer", "linear_attention_transformer",
                               "linear_attention_transformer:LinearAttentionTransformerLM"),
    "performer": Member("performer-pytorch", "performer_pytorch", "performer_pytorch:PerformerLM"),
    "simple-transformer": Member("simple-transformer", "simple_transformer", "simple_transformer:Transformer"),
    # an nn.Sequential has nothing that says it is causal: the one declaration it needs
    "rotary-decoder": Member("rotary-embedding-torch", "rotary_embedding_torch", "corpus_models:rotary_decoder",
                             {"kind": "decoder"}),
}

LINEAR_FEATURE_MAPS = ("efficient attention softmaxes q over its features and k over the sequence as feature maps "
                       "(k.softmax(dim=-2)), of projection outputs: no softmax normalises a product of two "
                       "activations, so there is no attention site, inconclusive")

#: (model, check) -> why a correct model of the corpus warns or skips there, and must
EXPLAINED: dict[tuple[str, str], str] = {
    ("x-transformers-decoder", "decode.cache"): (
        "x-transformers returns its cache only with return_intermediates=True, which tfcheck's cache protocol "
        "(past_key_values, or the last element of a returned tuple) does not pass: inconclusive, said as such"),
    ("local-attention", "shape.residual"): (
        "LocalTransformer wraps each branch in hyper-connections (num_residual_streams=4): the streams are mixed "
        "by learned matrices, not x + sublayer(x), a design the residual check cannot tell from a missing add"),
    ("local-attention", "norm.placement"): (
        "the same hyper-connections: no x + sublayer(x) add for a norm to sit at, so the placement cannot be read"),
    ("local-attention", "position.sensitivity"): (
        "the scores are (window, window + look-back) blocks of the length padded to the window size, never "
        "(length, length): inconclusive"),
    ("local-attention", "decode.cache"): (
        "LocalTransformer returns its cache only with return_cache=True, which tfcheck's cache protocol does not "
        "pass: inconclusive, said as such"),
    ("perceiver-lm", "shape.residual"): (
        "Perceiver IO's decoder cross-attention has no residual by design (the output queries are a fresh "
        "array read out of the latents): true of the code"),
    ("linear-attention", "attention.heads"): LINEAR_FEATURE_MAPS,
    ("linear-attention", "attention.scale"): LINEAR_FEATURE_MAPS,
    ("linear-attention", "attention.softmax_axis"): LINEAR_FEATURE_MAPS,
    ("performer", "attention.heads"): "FAVOR+ random-feature attention has no softmax: no attention site",
    ("performer", "attention.scale"): "FAVOR+ random-feature attention has no softmax: no attention site",
    ("performer", "attention.softmax_axis"): "FAVOR+ random-feature attention has no softmax: no attention site",
    ("simple-transformer", "numerics.half"): (
        "masked_fill(mask == 0, float('-1e20')) overflows float16 (becomes -inf, NaN in a fully masked row): "
        "true of the code, a warning until precision=fp32 or fp16 is declared"),
}

#: (model, check) -> the real bug the package has, which the battery must keep failing
REAL_BUGS: dict[tuple[str, str], str] = {
    ("simple-transformer", "attention.scale"): (
        "simple_transformer/self_attention.py:39 divides the scores by self.embed_size ** (1/2) (√d_model) instead "
        "of √head_dim (√d_k)"),
}

#: (model, check) -> a false alarm on a correct model: its cause and where it is to be fixed. Expected as the
#: current result; an entry whose alarm has gone fails the test, so that it is removed with the fix.
KNOWN_FALSE_ALARMS: dict[tuple[str, str], str] = {
}

#: packages tried and left out, and why
DROPPED: dict[str, str] = {
    "litgpt 0.5.13": ("requires huggingface-hub<1.4, which conflicts with transformers==5.24.0 (the test extra's "
                      "transformers)"),
    "transformer-lens 4.3.0": ("HookedTransformer was removed in 4.0; TransformerBridge.boot_transformers loads "
                               "weights from the Hub"),
    "transformer-lens 3.9.0": ("HookedTransformer embeds through a W_E parameter, not nn.Embedding, so tfcheck takes "
                               "it for a features model; with an inputs factory the token checks (mask.causal, "
                               "mask.padding, ...) do not apply"),
    "nGPT-pytorch 0.2.16": "an nGPT instance is unhashable, so torch's own model.parameters() raises",
    "reformer-pytorch 1.4.4": ("LSH attention needs the length to be a multiple of twice its bucket size (128): "
                               "every probe length is refused"),
    "x-transformers XTransformer": "forward returns the training loss, not logits: not a subject as it is",
    "x-transformers Decoder(cross_attend=True)": ("forward asserts that context= is passed: only an inputs "
                                                  "factory could give it, and the token checks would not apply"),
    "rotary-embedding-torch, cache_if_possible=True (its default)": (
        "false alarms (batch.independence and dropout.eval fail, position.sensitivity warns): RotaryEmbedding keeps "
        "its cached frequencies in a buffer and their length in a plain int, and tfcheck's state guard puts the "
        "buffer back but not the int, so later forwards read zero frequencies (tfcheck/engine/guard.py, "
        "_Tree.restore; issue 15). The corpus builds it with cache_if_possible=False until the fix"),
    "timm, open-clip-torch, vit-pytorch": "need torchvision, which does not import beside the CPU torch 2.13.0",
}


def expected(name: str) -> dict[str, str]:
    """check -> why it is not a PASS, for one corpus model (every table)."""
    out = {}
    for table in (EXPLAINED, REAL_BUGS, KNOWN_FALSE_ALARMS):
        out.update({check: why for (model, check), why in table.items() if model == name})
    return out
