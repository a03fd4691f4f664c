"""train.grad_flow on modules that ran and whose parameters get no gradient (issue 15), proven both ways. Three
correct designs warn and say why: a base model's return value its caller does not need (Hugging Face masked-LM
heads over a base that also pools), a selector read only through the indices of its topk (DeepSeek's
sparse-attention indexer, trained by a loss of its own), and a module of whole windows at a length shorter than
one window. Their look-alike bugs still fail: the pooled output computed and dropped by the code that made it,
used through .detach(), the indexer's scores used as values through .detach(), an attention that returns
zeros_like(q) (MRA's fallback without its kernel).

Each model here is a TransformerLM of the reference with one module changed, the style of the zoo."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from helpers import result
from reference_model import TransformerLM
from tfcheck import Status

GRAD = "train.grad_flow"


def _findings(model, **declared) -> dict[Status, list]:
    found: dict[Status, list] = {}
    for f in result(model, GRAD, **declared).findings:
        found.setdefault(f.status, []).append(f)
    return found


# ----- a pooled output ------------------------------------------------------------------------------------

class _PoolingStack(nn.Module):
    """A base model's layers: returns the hidden states and tanh(pooler(first position)), as BERT's does."""

    def __init__(self, layers: nn.ModuleList, d_model: int, returns_pooled: bool = True):
        super().__init__()
        self.layers, self.pooler, self.returns_pooled = layers, nn.Linear(d_model, d_model), returns_pooled

    def forward(self, x, mask):
        for layer in self.layers:
            x = layer(x, mask)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        return (x, pooled) if self.returns_pooled else x


class PooledOutputNotNeeded(TransformerLM):
    """Correct: the LM head reads the hidden states of a base that also returns a pooled output."""

    returns_pooled = True

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        layers = self.layers
        del self.layers
        self.base = _PoolingStack(layers, self.config.d_model, self.returns_pooled)

    def hidden(self, tokens):
        return self.base(self.pos(self.embed(tokens)), self.build_mask(tokens))

    def forward(self, tokens):
        x, _pooled = self.hidden(tokens)
        return self.lm_head(self.norm(x))


class PooledOutputThrownAway(PooledOutputNotNeeded):
    """The bug: the base computes its pooled output and drops it itself (as AttentionOutputThrownAway does)."""

    returns_pooled = False

    def forward(self, tokens):
        return self.lm_head(self.norm(self.hidden(tokens)))


class PooledOutputDetached(PooledOutputNotNeeded):
    """The bug: the head reads the pooled output, through .detach()."""

    def forward(self, tokens):
        x, pooled = self.hidden(tokens)
        return self.lm_head(self.norm(x + pooled.detach()[:, None]))


class _EmbeddingStack(_PoolingStack):
    """A base model that embeds its tokens too, returning (hidden states, pooled output)."""

    def __init__(self, embed: nn.Module, layers: nn.ModuleList, d_model: int):
        super().__init__(layers, d_model)
        self.embed = embed

    def forward(self, tokens, mask):
        return super().forward(self.embed(tokens), mask)


class BaseOutputIgnored(TransformerLM):
    """The bug: the head reads the base's embedding instead of anything the base returns, so the layers and the
    pooler the base ran never train (the embedding, shared, does)."""

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        embed, layers = self.embed, self.layers
        del self.embed, self.layers
        self.base = _EmbeddingStack(embed, layers, self.config.d_model)

    def forward(self, tokens):
        self.base(tokens, self.build_mask(tokens))
        return self.lm_head(self.norm(self.base.embed(tokens)))


def test_a_return_value_the_caller_does_not_need_is_a_warning_that_says_so():
    found = _findings(PooledOutputNotNeeded)
    assert set(found) == {Status.WARN}, found
    (finding,) = found[Status.WARN]
    assert finding.evidence["modules"] == ["base.pooler"] and finding.evidence["returned_by"] == "base"
    assert "computed and never read" in finding.message and "no later op uses it" in finding.message
    assert finding.location.module == "base" and finding.location.file.endswith("test_grad_flow_false_alarms.py")


@pytest.mark.parametrize("model,line", [(PooledOutputThrownAway, "self.pooler(x[:, 0])"),
                                        (PooledOutputDetached, "pooled.detach()")], ids=["thrown-away", "detached"])
def test_a_pooled_output_dropped_where_it_is_computed_or_detached_still_fails(model, line):
    """Named by the line that calls the pooler and drops what it gives, or by the .detach() that cuts it."""
    found = _findings(model)
    assert set(found) == {Status.FAIL}, found
    (finding,) = found[Status.FAIL]
    assert finding.evidence["modules"] == ["base.pooler"] and finding.row == "param-gets-no-gradient"
    with open(finding.location.file) as source:
        assert line in source.read().splitlines()[finding.location.line - 1]


def test_a_base_none_of_whose_return_value_is_read_still_fails():
    """What the base returns holds the layers' and the pooler's values, but no part of it is read: not a side
    output the caller did not need."""
    found = _findings(BaseOutputIgnored)
    assert set(found) == {Status.FAIL}, found
    assert found[Status.FAIL][0].evidence["modules"] == ["base.layers", "base.pooler"]


# ----- a top-k indexer ------------------------------------------------------------------------------------

class _Indexer(nn.Module):
    """Scores every past key for each query and returns the positions of the k best (a sparse-attention
    indexer)."""

    def __init__(self, d_model: int, k: int = 2):
        super().__init__()
        self.q, self.key, self.k = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model), k

    def scores(self, x, mask):
        return (self.q(x) @ self.key(x).transpose(-1, -2)).masked_fill(~mask[:, 0], float("-inf"))

    def forward(self, x, mask):
        return self.scores(x, mask).topk(self.k, dim=-1)


class _SparseLayer(nn.Module):
    """An encoder layer whose attention sees only the keys its indexer picked (the query itself always is: its
    past is never -inf)."""

    def __init__(self, layer: nn.Module, d_model: int, weighted: bool = False):
        super().__init__()
        self.layer, self.indexer, self.weighted = layer, _Indexer(d_model), weighted

    def forward(self, x, mask):
        best, picked = self.indexer(x, mask)
        keep = torch.zeros_like(mask).expand(-1, -1, x.shape[1], -1).scatter(-1, picked[:, None], True)
        out = self.layer(x, mask & keep)
        if self.weighted:  # the bug: the scores meant to weight the output, cut from the graph
            out = out * torch.sigmoid(best.detach()).mean(-1, keepdim=True)
        return out


class TopKIndexer(TransformerLM):
    """Correct: each layer's indexer picks the keys its attention reads, as DeepSeek's sparse attention does."""

    weighted = False

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        self.layers = nn.ModuleList(_SparseLayer(layer, self.config.d_model, self.weighted) for layer in self.layers)


class TopKScoresDetached(TopKIndexer):
    """The bug: the indexer's scores also weight the output, through .detach()."""

    weighted = True


def test_an_indexer_read_only_through_its_topk_indices_is_a_warning_that_names_the_topk():
    found = _findings(TopKIndexer)
    assert set(found) == {Status.WARN}, found
    (finding,) = found[Status.WARN]
    assert finding.row == "gradient-only-through-indices"
    assert finding.evidence["modules"] == ["layers.0.indexer", "layers.1.indexer"]
    assert "only through the indices of topk at" in finding.message and "carry no gradient" in finding.message
    with open(finding.location.file) as source:
        assert ".topk(self.k" in source.read().splitlines()[finding.location.line - 1]


def test_an_indexer_whose_scores_are_used_through_detach_still_fails():
    found = _findings(TopKScoresDetached)
    assert set(found) == {Status.FAIL}, found
    assert found[Status.FAIL][0].evidence["modules"] == ["layers.0.indexer", "layers.1.indexer"]



class _PackedIndexer(_Indexer):
    """Glm5Next's style: the indexer packs its keys and the padding mask as one tensor (so one cache holds both)
    and reads them back apart, by a split and by the mask's channel, which its layer's attention also applies;
    ``channel`` is the one read back as the mask (-1: the mask's own)."""

    channel = -1

    def forward(self, x, mask):
        keys = self.key(x)
        visible = mask[:, 0].any(-2)  # (b, s): keys some query may see
        packed = torch.cat([keys, visible.to(keys.dtype)[..., None]], dim=-1)
        keys, _ = torch.split(packed, [keys.shape[-1], 1], dim=-1)
        visible = packed[..., self.channel].bool()
        scores = (self.q(x) @ keys.transpose(-1, -2)).masked_fill(~mask[:, 0], float("-inf"))
        return *scores.topk(self.k, dim=-1), visible


class _KeyChannelAsMask(_PackedIndexer):
    channel = 0  # the bug: a key channel, computed from the indexer's parameters, read back as the mask


class _PackedSparseLayer(_SparseLayer):
    def __init__(self, layer: nn.Module, d_model: int, indexer: type[_PackedIndexer]):
        super().__init__(layer, d_model)
        self.indexer = indexer(d_model)

    def forward(self, x, mask):
        _, picked, visible = self.indexer(x, mask)
        keep = torch.zeros_like(mask).expand(-1, -1, x.shape[1], -1).scatter(-1, picked[:, None], True)
        return self.layer(x, mask & keep & visible[:, None, None, :])


class PackedMaskIndexer(TransformerLM):
    """Correct: as TopKIndexer, with Glm5Next's packed indexer."""

    indexer = _PackedIndexer

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        self.layers = nn.ModuleList(_PackedSparseLayer(layer, self.config.d_model, self.indexer)
                                    for layer in self.layers)


class KeyChannelReadAsMask(PackedMaskIndexer):
    """The bug: the packed tensor is read back at a key channel where the mask was meant, so the attention's mask
    is made from the indexer's keys by a bool(), which carries no gradient."""

    indexer = _KeyChannelAsMask


def test_a_padding_mask_packed_beside_the_keys_and_read_back_is_no_use_of_the_keys():
    found = _findings(PackedMaskIndexer)
    assert set(found) == {Status.WARN}, found
    (finding,) = found[Status.WARN]
    assert finding.row == "gradient-only-through-indices", finding
    assert finding.evidence["selections"] == [finding.evidence["selections"][0]]
    assert finding.evidence["selections"][0].startswith("topk at"), finding.evidence


def test_a_key_channel_of_the_packed_tensor_read_back_as_the_mask_still_fails():
    found = _findings(KeyChannelReadAsMask)
    assert set(found) == {Status.FAIL}, found
    assert found[Status.FAIL][0].evidence["modules"] == ["layers.0.indexer", "layers.1.indexer"]

# ----- a module of whole windows, an attention that returns zeros --------------------------------------------

class _WindowSummary(nn.Module):
    """Adds to every position the sum of the means of each whole window of 16 projected tokens; an input shorter
    than a window has none, and gets an empty summary (DeepSeek V4's compressor does the same)."""

    def __init__(self, d_model: int, window: int = 16):
        super().__init__()
        self.proj, self.window = nn.Linear(d_model, d_model), window

    def forward(self, x):
        b, s, d = x.shape
        windows = self.proj(x)[:, :s // self.window * self.window]
        if windows.shape[1]:
            summary = windows.reshape(b, -1, self.window, d).mean(2)
        else:
            summary = windows.new_zeros((b, 0, d))
        return x + summary.sum(1, keepdim=True)


class WindowSummaryLM(TransformerLM):
    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        self.summary = _WindowSummary(self.config.d_model)

    def forward(self, tokens):
        x = self.summary(self.pos(self.embed(tokens)))
        mask = self.build_mask(tokens)
        for layer in self.layers:
            x = layer(x, mask)
        return self.lm_head(self.norm(x))


def test_a_module_of_whole_windows_shorter_than_the_input_cannot_be_judged_and_passes_when_long_enough():
    found = _findings(WindowSummaryLM)
    assert set(found) == {Status.WARN}, found
    (finding,) = found[Status.WARN]
    assert finding.evidence["modules"] == ["summary"] and "no elements" in finding.message
    assert finding.evidence["emptied_by"].startswith("__getitem__ at") and "probe_len=INT" in finding.message
    # the positive control: at a length of whole windows the same module gets its gradient
    assert _findings(WindowSummaryLM, probe_len=32).keys() == {Status.PASS}


class _ZerosAttention(nn.Module):
    """An attention whose kernel is missing and whose fallback returns zeros with requires_grad (MRA's)."""

    def __init__(self, attention: nn.Module):
        super().__init__()
        self.attention = attention

    def forward(self, q, k, v, mask=None):
        q = self.attention.w_q(q)
        return torch.zeros_like(q).requires_grad_()


class AttentionFallbackReturnsZeros(TransformerLM):
    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        for layer in self.layers:
            layer.self_attn = _ZerosAttention(layer.self_attn)


def test_an_op_that_gives_values_without_their_graph_is_named_as_the_cut():
    found = _findings(AttentionFallbackReturnsZeros)
    assert Status.FAIL in found, found
    finding = found[Status.FAIL][0]
    assert finding.evidence["graph_cut_by"].startswith("zeros_like at") and "cut by zeros_like" in finding.message
    with open(finding.location.file) as source:
        assert "torch.zeros_like(q)" in source.read().splitlines()[finding.location.line - 1]


# ----- Hugging Face models built small ------------------------------------------------------------------------

def test_hugging_face_masked_lm_over_a_pooling_base_warns_about_the_pooler():
    pytest.importorskip("transformers")
    found = _findings("transformers:BigBirdForMaskedLM")
    assert set(found) == {Status.WARN}, found
    (finding,) = found[Status.WARN]
    assert finding.evidence["modules"] == ["bert.pooler"] and finding.evidence["returned_by"] == "bert"


def test_deepseek_v32_sparse_attention_indexer_warns_with_its_topk():
    pytest.importorskip("transformers")
    found = _findings("transformers:DeepseekV32ForCausalLM")
    assert set(found) == {Status.WARN}, found
    (finding,) = found[Status.WARN]
    assert finding.row == "gradient-only-through-indices" and "topk at" in finding.message
    assert all(m.endswith("self_attn.indexer") for m in finding.evidence["modules"])
    assert finding.location.file.endswith("modeling_deepseek_v32.py")


def test_glm5_next_indexer_packs_its_mask_beside_its_keys_and_warns_at_either_length():
    """Glm5Next's indexer (modeling_glm5_next.py, Glm5NextTextIndexer.forward) packs the padding mask as one more
    channel beside its keys (torch.cat([k, gate_scores, valid_channel])) and reads it back (packed_states[..., -1]
    .bool(), torch.split): no use of its keys. Its pools are index_kpool (16) tokens long: at the probe length none
    is complete (nothing is computed from its parameters); at 32 tokens it is read through its topk."""
    pytest.importorskip("transformers")
    short = _findings("transformers:Glm5NextTextModel")
    assert set(short) == {Status.WARN}, short
    assert "no elements" in short[Status.WARN][0].message
    long = _findings("transformers:Glm5NextTextModel", probe_len=32)
    assert set(long) == {Status.WARN}, long
    (finding,) = long[Status.WARN]
    assert finding.row == "gradient-only-through-indices" and "topk at" in finding.message
    assert finding.evidence["modules"] == ["layers.1.self_attn.indexer"]


def test_mra_without_its_kernel_fails_at_the_zeros_its_attention_returns():
    """A true finding: without the hub kernel, MRA's attention returns torch.zeros_like(query).requires_grad_()
    (transformers' modeling_mra.mra2_attention), so query, key and value never train."""
    pytest.importorskip("transformers")
    found = _findings("transformers:MraModel")
    assert Status.FAIL in found, found
    finding = found[Status.FAIL][0]
    assert finding.evidence["graph_cut_by"].startswith("zeros_like at")
    assert finding.location.file.endswith("modeling_mra.py")
    assert all(m.endswith("attention.self") for m in finding.evidence["modules"])


def test_deepseek_v4_compressor_shorter_than_its_window_cannot_be_judged_and_trains_at_one_window():
    """The heavily compressed attention compresses whole windows of compress_rates['heavily_compressed_attention']
    tokens (128): at the probe length its slice of them is empty; at 128 tokens its projections get gradients."""
    pytest.importorskip("transformers")
    found = _findings("transformers:DeepseekV4Model")
    assert Status.FAIL not in found, found
    empty = [f for f in found[Status.WARN] if "no elements" in f.message]
    assert {m.rsplit(".", 1)[-1] for m in empty[0].evidence["modules"]} == {"kv_proj", "gate_proj"}  # each HCA layer
    long = _findings("transformers:DeepseekV4Model", probe_len=128, max_len=128)
    assert not [f for f in long.get(Status.WARN, []) if "no elements" in f.message], long


# ----- a decoding cache updated in place ------------------------------------------------------------------
class StatefulMixer(nn.Module):
    """A recurrent token mixer in the style of RWKV's: with ``use_cache`` on (its default outside training) it
    writes its last hidden state into a state tensor in place, which a backward through that forward cannot
    use."""

    def __init__(self, d: int):
        super().__init__()
        self.mix = nn.Linear(d, d)

    def forward(self, x, use_cache: bool = True):
        out = torch.tanh(torch.cumsum(self.mix(x), dim=1))  # tanh's backward reads its output
        if use_cache:
            state = out[:, -1]
            state.mul_(1.0)  # the state update: in place, on a tensor the backward needs
        return out


class CachedLM(nn.Module):
    __tfcheck__ = {"kind": "decoder"}

    def __init__(self, vocab: int = 40, d: int = 16):
        super().__init__()
        self.embed, self.mixer, self.head = nn.Embedding(vocab, d), StatefulMixer(d), nn.Linear(d, vocab)

    def forward(self, input_ids, use_cache: bool | None = None):
        use_cache = not self.training if use_cache is None else use_cache
        return self.head(self.mixer(self.embed(input_ids), use_cache=use_cache))


@pytest.mark.parametrize("check", [GRAD, "train.overfit_batch"])
def test_a_differentiated_forward_runs_without_the_decoding_cache(check):
    """Before tfcheck passed use_cache=False to the forwards it differentiates, these were ERRORs ('modified by
    an inplace operation'), reported as a bug in tfcheck; a user trains in train mode, where the cache is off."""
    assert result(CachedLM(), check).status is not Status.ERROR, result(CachedLM(), check)


def test_rwkv_gradients_flow():
    pytest.importorskip("transformers")
    assert result("transformers:RwkvModel", GRAD).status is Status.PASS
