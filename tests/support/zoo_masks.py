"""Mask bugs in the styles of other people's code (not the reference model's): a GPT on
nn.MultiheadAttention, the Annotated-Transformer tutorial's forward(x, mask), a Hugging Face-like
forward(input_ids, attention_mask), and a seq2seq wrapper around nn.Transformer. Each style has a
correct model, and each broken one changes ONE thing of it."""
from __future__ import annotations

import math

import torch
import torch.nn as nn

VOCAB, D, HEADS, MAX_LEN = 61, 32, 4, 32


# ----- GPT-style forward(idx) on nn.MultiheadAttention (True in attn_mask = may NOT attend) ----------

class _MHABlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(D, HEADS, batch_first=True)
        self.norm = nn.LayerNorm(D)
        self.ffn = nn.Sequential(nn.Linear(D, 2 * D), nn.GELU(), nn.Linear(2 * D, D))

    def forward(self, x, attn_mask):
        h = self.norm(x)
        x = x + self.attn(h, h, h, attn_mask=attn_mask, need_weights=False)[0]
        return x + self.ffn(x)


class MHAGPT(nn.Module):
    """Correct: attn_mask = triu(ones, diagonal=1), True above the diagonal = may not attend."""

    __tfcheck__ = {"kind": "decoder"}

    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, D)
        self.pos = nn.Embedding(MAX_LEN, D)
        self.blocks = nn.ModuleList(_MHABlock() for _ in range(2))
        self.head = nn.Linear(D, VOCAB)
        self.block_size = MAX_LEN

    def attn_mask(self, s, device):
        return torch.triu(torch.ones(s, s, dtype=torch.bool, device=device), diagonal=1)

    def forward(self, idx):
        s = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(s, device=idx.device))
        mask = self.attn_mask(s, idx.device)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(x)


class MHAGPTWithoutMask(MHAGPT):
    def attn_mask(self, s, device):
        return None


class MHAGPTKeepMaskGiven(MHAGPT):
    """A keep mask (tril, True = may attend) given to nn.MultiheadAttention, which reads True as NOT allowed."""

    def attn_mask(self, s, device):
        return torch.tril(torch.ones(s, s, dtype=torch.bool, device=device))


class MHAGPTOffByOne(MHAGPT):
    def attn_mask(self, s, device):
        return torch.triu(torch.ones(s, s, dtype=torch.bool, device=device), diagonal=2)


class MHAGPTFloatKeepMask(MHAGPT):
    """A float 0/1 keep mask: nn.MultiheadAttention ADDS float masks to the scores."""

    def attn_mask(self, s, device):
        return torch.tril(torch.ones(s, s, device=device))


# ----- the tutorial style: forward(x, mask), masks (b, 1, 1, s), masked_fill(mask == 0, -1e9) -----

def attention(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    return scores.softmax(dim=-1) @ value


class _TutorialLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D)
        self.out = nn.Linear(D, D)
        self.norm = nn.LayerNorm(D)

    def attend(self, q, k, v, mask):
        return attention(q, k, v, mask)

    def forward(self, x, mask):
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)  # 3 x (b, h, s, d_k)
        ctx = self.attend(q, k, v, mask).transpose(1, 2).reshape(b, s, D)
        return self.norm(x + self.out(ctx))


class TutorialEncoder(nn.Module):
    """Correct: forward(x, mask) with a (b, s) keep mask (1 = real), used as (b, 1, 1, s)."""

    __tfcheck__ = {"kind": "encoder"}

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.layers = nn.ModuleList(_TutorialLayer() for _ in range(2))

    def layout(self, mask):
        return mask[:, None, None, :]  # (b, 1, 1, s): the key axis

    def forward(self, x, mask=None):
        h = self.embed(x) * math.sqrt(D)
        mask = self.layout(mask) if mask is not None else None
        for layer in self.layers:
            h = layer(h, mask)
        return h


class TutorialMaskOnQueries(TutorialEncoder):
    def layout(self, mask):
        return mask[:, None, :, None]  # (b, 1, s, 1): the query axis


class TutorialMaskIgnored(TutorialEncoder):
    def layout(self, mask):
        return None


class _InvertedLayer(_TutorialLayer):
    def attend(self, q, k, v, mask):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            scores = scores.masked_fill(mask == 1, -1e9)  # reads the keep mask as a pad mask
        return scores.softmax(dim=-1) @ v


class TutorialMaskInverted(TutorialEncoder):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(_InvertedLayer() for _ in range(2))


class _WeightsMaskedLayer(_TutorialLayer):
    def attend(self, q, k, v, mask):
        weights = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(dim=-1)
        return (weights * mask) @ v  # the mask multiplies the weights after the softmax


class TutorialDecoderMaskAfterSoftmax(TutorialEncoder):
    """A tutorial decoder forward(x) that multiplies the attention weights by the subsequent mask."""

    __tfcheck__ = {"kind": "decoder"}

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(_WeightsMaskedLayer() for _ in range(2))

    def forward(self, x):
        s = x.shape[1]
        subsequent = torch.tril(torch.ones(1, 1, s, s, device=x.device))
        h = self.embed(x) * math.sqrt(D)
        for layer in self.layers:
            h = layer(h, subsequent)
        return h


# ----- Hugging Face-like: forward(input_ids, attention_mask=None), 1 = real token -----------------

class _HFLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(D, D) for _ in range(4))
        self.norm = nn.LayerNorm(D)

    def forward(self, x, additive):  # additive: (b, 1, 1, s), 0 or a large negative number
        b, s, _ = x.shape
        split = lambda t: t.view(b, s, HEADS, D // HEADS).transpose(1, 2)  # noqa: E731  (b, h, s, d_k)
        scores = split(self.q(x)) @ split(self.k(x)).transpose(-2, -1) / math.sqrt(D // HEADS) + additive
        ctx = (scores.softmax(-1) @ split(self.v(x))).transpose(1, 2).reshape(b, s, D)
        return self.norm(x + self.o(ctx))


class HFLikeEncoder(nn.Module):
    """Correct: the extended additive mask (1 - attention_mask) * finfo.min, on the key axis."""

    def __init__(self):
        super().__init__()
        self.embeddings = nn.Embedding(VOCAB, D, padding_idx=0)
        self.layer = nn.ModuleList(_HFLayer() for _ in range(2))
        self.pad_token_id = 0

    def extended(self, attention_mask, dtype):
        return (1.0 - attention_mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min

    def forward(self, input_ids, attention_mask=None):
        x = self.embeddings(input_ids)
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        additive = self.extended(attention_mask, x.dtype)
        for layer in self.layer:
            x = layer(x, additive)
        return x


class HFLikeInvertedMask(HFLikeEncoder):
    def extended(self, attention_mask, dtype):
        return attention_mask[:, None, None, :].to(dtype) * -1e9  # 1 = real token read as 1 = masked


class _BmmLayer(nn.Module):
    """Attention over (b * h, s, s) scores, the padding expanded per head."""

    def __init__(self, interleave: bool):
        super().__init__()
        self.qkv = nn.Linear(D, 3 * D)
        self.o = nn.Linear(D, D)
        self.interleave = interleave

    def forward(self, x, keep):  # keep: (b, s) 1 = real
        b, s, _ = x.shape
        q, k, v = (t.reshape(b, s, HEADS, D // HEADS).transpose(1, 2).reshape(b * HEADS, s, D // HEADS)
                   for t in self.qkv(x).chunk(3, dim=-1))  # (b * h, s, d_k), sample-major
        pad = (keep == 0)[:, None, :]  # (b, 1, s)
        pad = pad.repeat_interleave(HEADS, dim=0) if self.interleave else pad.repeat(HEADS, 1, 1)
        scores = (q @ k.transpose(1, 2) / math.sqrt(D // HEADS)).masked_fill(pad, float("-inf"))
        ctx = (scores.softmax(-1) @ v).reshape(b, HEADS, s, D // HEADS).transpose(1, 2).reshape(b, s, D)
        return x + self.o(ctx)


class HFLikeBmmEncoder(nn.Module):
    """Correct: the (b, s) padding repeated per head with repeat_interleave, matching the sample-major
    (b * h) layout of the scores."""

    interleave = True

    def __init__(self):
        super().__init__()
        self.embeddings = nn.Embedding(VOCAB, D)
        self.layer = nn.ModuleList(_BmmLayer(self.interleave) for _ in range(2))

    def forward(self, input_ids, attention_mask=None):
        x = self.embeddings(input_ids)
        keep = attention_mask if attention_mask is not None else torch.ones_like(input_ids)
        for layer in self.layer:
            x = layer(x, keep)
        return x


class HFLikeMaskRepeatedNotInterleaved(HFLikeBmmEncoder):
    """mask.repeat(h, 1, 1) gives row i of the (b * h) scores the padding of sample i % b: it only shows
    when the samples are padded differently."""

    interleave = False


class HFLikeCausalLM(nn.Module):
    """Correct causal LM: the causal additive mask plus the padding one."""

    __tfcheck__ = {"kind": "decoder"}

    def __init__(self):
        super().__init__()
        self.embeddings = nn.Embedding(VOCAB, D)
        self.layer = nn.ModuleList(_HFLayer() for _ in range(2))
        self.lm_head = nn.Linear(D, VOCAB)

    def prepare(self, x):
        return x

    def forward(self, input_ids, attention_mask=None):
        x = self.prepare(self.embeddings(input_ids))
        s = input_ids.shape[1]
        keep = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        allowed = torch.tril(torch.ones(s, s, dtype=torch.bool, device=x.device)) & keep[:, None, None, :].bool()
        additive = torch.zeros(allowed.shape, dtype=x.dtype, device=x.device).masked_fill(
            ~allowed, torch.finfo(x.dtype).min)
        for layer in self.layer:
            x = layer(x, additive)
        return self.lm_head(x)


class HFLikeCausalLMCentresOverTheSequence(HFLikeCausalLM):
    def prepare(self, x):
        return x - x.mean(dim=1, keepdim=True)  # the mean over the sequence includes the future


# ----- seq2seq around nn.Transformer: forward(src, tgt), pad_id = 0 ---------------------------------

class TorchSeq2Seq(nn.Module):
    """Correct, as torch documents nn.Transformer: src_key_padding_mask and memory_key_padding_mask
    from pad_id, and tgt_mask = generate_square_subsequent_mask."""

    __tfcheck__ = {"kind": "seq2seq", "pad_id": 0, "mask": "internal"}

    def __init__(self):
        super().__init__()
        self.src_embed = nn.Embedding(VOCAB, D)
        self.tgt_embed = nn.Embedding(VOCAB, D)
        self.transformer = nn.Transformer(D, HEADS, 2, 2, 64, dropout=0.0, batch_first=True)
        # tfcheck's forward-error explainer cannot yet describe the nested tensors of the fast path
        self.transformer.encoder.enable_nested_tensor = self.transformer.encoder.use_nested_tensor = False
        self.generator = nn.Linear(D, VOCAB)

    def masks(self, src, tgt):
        pad = src == 0
        return {"src_key_padding_mask": pad, "memory_key_padding_mask": pad,
                "tgt_mask": nn.Transformer.generate_square_subsequent_mask(tgt.shape[1], device=tgt.device)}

    def forward(self, src, tgt):
        out = self.transformer(self.src_embed(src), self.tgt_embed(tgt), **self.masks(src, tgt))
        return self.generator(out)


class TorchSeq2SeqWithoutMemoryMask(TorchSeq2Seq):
    def masks(self, src, tgt):
        masks = super().masks(src, tgt)
        del masks["memory_key_padding_mask"]
        return masks


class TorchSeq2SeqWithoutTgtMask(TorchSeq2Seq):
    def masks(self, src, tgt):
        masks = super().masks(src, tgt)
        del masks["tgt_mask"]
        return masks


class ConstantOutput(nn.Module):
    """Its output does not depend on its input: no measurement can be conclusive."""

    __tfcheck__ = {"kind": "decoder", "pad_id": 0, "mask": "internal"}

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.bias = nn.Parameter(torch.randn(VOCAB))

    def forward(self, tokens):
        return self.bias.expand(*tokens.shape, VOCAB) + 0 * self.embed(tokens).sum(-1, keepdim=True)


class PadIdOnlyEncoder(nn.Module):
    """Declares nothing and takes no mask; its embedding's padding_idx reveals pad_id = 0, and it never
    masks the pads."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D, padding_idx=0)
        self.layers = nn.ModuleList(_TutorialLayer() for _ in range(2))

    def forward(self, tokens):
        h = self.embed(tokens) + 0.1
        for layer in self.layers:
            h = layer(h, None)
        return h


# ----- pooled classifiers: forward(input_ids, attention_mask) -> (batch, labels), no length axis by design --------

LABELS = 3


class PooledClassifier(HFLikeEncoder):
    """Correct: a sequence classifier on the Hugging Face-like encoder, its logits (b, LABELS) read from the first
    ([CLS]) position through a tanh pooler, as BertForSequenceClassification does."""

    def __init__(self):
        super().__init__()
        self.pooler, self.classifier = nn.Linear(D, D), nn.Linear(D, LABELS)

    def pool(self, x, attention_mask):
        return x[:, 0]

    def forward(self, input_ids, attention_mask=None):
        x = super().forward(input_ids, attention_mask)
        return self.classifier(torch.tanh(self.pooler(self.pool(x, attention_mask))))


class PooledClassifierMaskOnQueries(PooledClassifier):
    """Bug: the extended mask laid out on the query axis, (b, 1, s, 1): the [CLS] query still attends to the pads."""

    def extended(self, attention_mask, dtype):
        return (1.0 - attention_mask[:, None, :, None].to(dtype)) * torch.finfo(dtype).min  # the bug


class PooledClassifierIgnoresMask(PooledClassifier):
    """Bug: takes attention_mask and never reads it: every position attends to the pads."""

    def forward(self, input_ids, attention_mask=None):
        x = self.embeddings(input_ids)
        for layer in self.layer:
            x = layer(x, 0.0)  # the bug: no mask reaches the scores
        return self.classifier(torch.tanh(self.pooler(x[:, 0])))


class MeanPooledClassifier(PooledClassifier):
    """Correct: the mean of the real tokens' states (a sentence encoder's pooling), the pads left out of it."""

    def pool(self, x, attention_mask):
        keep = (torch.ones(x.shape[:2], device=x.device) if attention_mask is None else attention_mask)[..., None]
        keep = keep.to(x.dtype)
        return (x * keep).sum(1) / keep.sum(1).clamp_min(1.0)


class MeanPooledOverThePads(PooledClassifier):
    """Bug: the attention masks the pads, but the pooling averages every position, pads included."""

    def pool(self, x, attention_mask):
        return x.mean(1)  # the bug: the mean is not masked


class PooledConstant(PooledClassifier):
    """Its pooled states are zero whatever the tokens: no measurement of its padding can be conclusive."""

    def pool(self, x, attention_mask):
        return (0 * x)[:, 0]
