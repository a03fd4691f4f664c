"""Schedules and models for the training checks: broken schedules as factories fn(optimizer) -> scheduler,
correct ones written as users write them, and models in other people's styles (nanoGPT's forward(idx,
targets=None), a Hugging Face-like labels= model, a configure_optimizers method)."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import LambdaLR

from reference_model import TransformerLM

D_MODEL, WARMUP = 32, 4000


# ----- broken schedules (absolute-rate lambdas, built with lr=1.0) -------------------------------------

def noam_divides_by_zero(optimizer):
    """The paper's formula taken literally: step 0 gives 0 ** -0.5."""
    return LambdaLR(optimizer, lambda step: D_MODEL ** -0.5 * min(step ** -0.5, step * WARMUP ** -1.5))


def warmup_integer_division(optimizer):
    """step // warmup is 0 until warmup ends: the rate waits at 0 instead of ramping."""
    return LambdaLR(optimizer, lambda step: 1e-3 * min(1, step // 100))


def warmup_from_zero(optimizer):
    """step / warmup is 0 at step 0 (the first optimiser step does nothing), correct after."""
    return LambdaLR(optimizer, lambda step: 1e-3 * min(1.0, step / 100))


def warmup_never_stops(optimizer):
    """A linear warmup with no cap: the rate grows for the whole run."""
    return LambdaLR(optimizer, lambda step: 1e-3 * (step + 1) / 100)


def noam_min_max_swapped(optimizer):
    """max instead of min: the rate starts at its highest, decays during warmup, then rises for ever."""
    return LambdaLR(optimizer, lambda step: D_MODEL ** -0.5 * max((step + 1) ** -0.5, (step + 1) * WARMUP ** -1.5))


def linear_decay_past_its_end(optimizer):
    """1 - step / total with total shorter than the run: negative rates after step 1000."""
    return LambdaLR(optimizer, lambda step: 1e-3 * min(1.0, (step + 1) / 100) * (1 - step / 1000))


def constant(optimizer):
    """No warmup: 3e-4 from the first step."""
    return LambdaLR(optimizer, lambda step: 3e-4)


def multiplier_peak_too_high(optimizer):
    """A multiplier schedule (0..1) given lr=1.0 would peak at 1.0; this one returns an absolute 0.5."""
    return LambdaLR(optimizer, lambda step: 0.5 * min(1.0, (step + 1) / 100))


# ----- correct schedules, as users write them -----------------------------------------------------------

def linear_with_warmup(optimizer, warmup=100, total=2000):
    """Hugging Face's linear schedule written out, counting from step + 1: a multiplier of the base lr."""
    def factor(step):
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total - step) / max(1, total - warmup))
    return LambdaLR(optimizer, factor)


def constant_with_warmup(optimizer, warmup=100):
    return LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))


def adamw_with_warmup(params):
    """The fn(params) -> (optimizer, scheduler) form."""
    optimizer = torch.optim.AdamW(params, lr=5e-4, weight_decay=0.01)
    return optimizer, constant_with_warmup(optimizer)


# ----- models ------------------------------------------------------------------------------------------

class NanoGPTStyle(nn.Module):
    """nanoGPT's interface: forward(idx, targets=None) -> (logits, loss); without targets only the last
    position's logits are returned (the inference shortcut), so the full logits need targets."""

    def __init__(self, vocab_size=101, n_embd=32, n_head=4, n_layer=2, block_size=64):
        super().__init__()
        self.block_size = block_size
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        layer = nn.TransformerEncoderLayer(n_embd, n_head, 4 * n_embd, dropout=0.1, batch_first=True,
                                           norm_first=True)
        self.h = nn.TransformerEncoder(layer, n_layer, enable_nested_tensor=False)
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight  # tied, as in nanoGPT
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
        self.__tfcheck__ = {"kind": "decoder"}

    def forward(self, idx, targets=None):
        b, t = idx.shape  # (B, T)
        pos = torch.arange(t, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)  # (B, T, C)
        causal = torch.triu(torch.ones(t, t, dtype=torch.bool, device=idx.device), 1)  # True = may NOT attend
        x = self.ln_f(self.h(x, mask=causal, is_causal=True))
        if targets is not None:
            logits = self.lm_head(x)  # (B, T, vocab)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1)
            return logits, loss
        return self.lm_head(x[:, [-1], :]), None  # (B, 1, vocab): inference needs the last position only


class HFLikeLM(TransformerLM):
    """A Hugging Face-style causal LM: forward(input_ids, labels=None) -> object with .loss and .logits;
    labels are the input ids, shifted inside."""

    __tfcheck__ = {"kind": "decoder", "pad_id": 0}

    def forward(self, input_ids, labels=None):
        logits = super().forward(input_ids)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten())
        return {"loss": loss, "logits": logits}


class LossFromDetachedLogits(HFLikeLM):
    """The loss is computed from logits.detach() (meant for logging, used for training): it has no graph."""

    def forward(self, input_ids, labels=None):
        out = super().forward(input_ids)
        if labels is not None:
            logits = out["logits"].detach()
            out["loss"] = F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten())
        return out


class LossOutsideTheLogitsGraph(HFLikeLM):
    """The loss is computed from logits of their own (as a fused or chunked loss computes them from the hidden
    states): the logits returned are not in the loss's graph, so no gradient of the loss reaches them."""

    shift = 1

    def forward(self, input_ids, labels=None):
        out = super().forward(input_ids)
        if labels is not None:
            again = TransformerLM.forward(self, input_ids)
            s = self.shift
            out["loss"] = F.cross_entropy(again[:, :again.shape[1] - s].flatten(0, 1), labels[:, s:].flatten())
        return out


class UnshiftedLossOutsideTheLogitsGraph(LossOutsideTheLogitsGraph):
    """As LossOutsideTheLogitsGraph, with the labels not shifted: position t is trained on its own token."""

    shift = 0


class OverflowingSoftmaxLM(TransformerLM):
    """Log-probabilities from a softmax written by hand over sharpened logits (temperature 0.04), without
    subtracting the maximum: fine at initialisation, the loss turns NaN at step 10 of 30 as the logits grow past
    exp's overflow (88.7 in float32), long after a descent that stops at its verdict has stopped."""

    temperature = 0.04

    def forward(self, tokens):
        logits = super().forward(tokens) / self.temperature
        e = torch.exp(logits)  # the defect: exp(logits - logits.amax(-1, keepdim=True))
        return torch.log(e / e.sum(dim=-1, keepdim=True))


class StableHandWrittenSoftmaxLM(OverflowingSoftmaxLM):
    """As OverflowingSoftmaxLM, with the maximum subtracted: exp never exceeds 1."""

    def forward(self, tokens):
        logits = TransformerLM.forward(self, tokens) / self.temperature
        e = torch.exp(logits - logits.amax(dim=-1, keepdim=True))
        return torch.log(e / e.sum(dim=-1, keepdim=True))


class _SqrtWhereFFN(nn.Module):
    """sqrt(h) where h > 0, 0 elsewhere: a finite forward, but the discarded branch's sqrt of negative
    values has a NaN derivative, and torch.where's zero gradient times NaN is NaN."""

    def __init__(self, ffn):
        super().__init__()
        self.w_1, self.w_2 = ffn.w_1, ffn.w_2

    def forward(self, x):
        h = self.w_1(x)
        return self.w_2(torch.where(h > 0, h.sqrt(), torch.zeros_like(h)))


class NaNGradientLM(TransformerLM):
    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        for layer in self.layers:
            layer.ffn = _SqrtWhereFFN(layer.ffn)


class FrozenEmbeddingLM(TransformerLM):
    """The token embedding frozen on purpose (pretrained vectors): information, not a failure."""

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        self.embed.embedding.weight.requires_grad_(False)


class WithConfigureOptimizers(TransformerLM):
    """A Lightning-style configure_optimizers() returning the optimizer and a warmup schedule."""

    __tfcheck__ = {"kind": "decoder", "causal": True, "mask": "internal", "pad_id": 0}  # no declared schedule

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
        from reference_model import noam_schedule

        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": noam_schedule(optimizer), "interval": "step"}}


class _UngatedSDPA(nn.Module):
    def __init__(self, attn):
        super().__init__()
        self.inner = attn

    def forward(self, query, key, value, mask=None):
        a = self.inner
        b, s, _ = query.shape
        q, k, v = (a._split_heads(w(t)) for w, t in ((a.w_q, query), (a.w_k, key), (a.w_v, value)))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.1)  # not gated on training
        return a.w_o(out.transpose(1, 2).reshape(b, s, a.d_model))


class SDPADropoutUngated(TransformerLM):
    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        for layer in self.layers:
            layer.self_attn = _UngatedSDPA(layer.self_attn)


class _InertDropout(nn.Dropout):
    def forward(self, x):
        return F.dropout(x, self.p, training=False)  # hard-coded: never active


class DropoutNeverApplied(TransformerLM):
    """Dropout modules built with p=0.1 whose forward passes training=False in every mode."""

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        for parent in list(self.modules()):
            for name, child in list(parent.named_children()):
                if type(child) is nn.Dropout:
                    setattr(parent, name, _InertDropout(child.p))


class _HandWrittenLayerNorm(nn.Module):
    """The Annotated Transformer's LayerNorm: a_2 * (x - mean) / (std + eps) + b_2, no nn.LayerNorm op."""

    def __init__(self, features: int, eps: float = 1e-6):
        super().__init__()
        self.a_2 = nn.Parameter(torch.ones(features))
        self.b_2 = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)
        return self.a_2 * (x - mean) / (std + self.eps) + self.b_2


class HandNormEncoder(nn.Module):
    """Two blocks around hand-written norms: Pre-LN as the Annotated Transformer's SublayerConnection
    (x + sublayer(norm(x))), or Post-LN (norm(x + sublayer(x)))."""

    __tfcheck__ = {"kind": "encoder"}

    def __init__(self, pre_ln: bool = True, vocab_size: int = 101, d: int = 32):
        super().__init__()
        self.pre_ln = pre_ln
        self.emb = nn.Embedding(vocab_size, d)
        self.attn = nn.ModuleList(nn.MultiheadAttention(d, 4, batch_first=True) for _ in range(2))
        self.ffn = nn.ModuleList(nn.Sequential(nn.Linear(d, 64), nn.ReLU(), nn.Linear(64, d)) for _ in range(2))
        self.norm1 = nn.ModuleList(_HandWrittenLayerNorm(d) for _ in range(2))
        self.norm2 = nn.ModuleList(_HandWrittenLayerNorm(d) for _ in range(2))
        self.out = nn.Linear(d, vocab_size)

    def forward(self, input_ids):
        x = self.emb(input_ids)
        for attn, ffn, n1, n2 in zip(self.attn, self.ffn, self.norm1, self.norm2):
            if self.pre_ln:
                h = n1(x)
                x = x + attn(h, h, h, need_weights=False)[0]
                x = x + ffn(n2(x))
            else:
                x = n1(x + attn(x, x, x, need_weights=False)[0])
                x = n2(x + ffn(x))
        return self.out(x)


#: How CopiedResidualLM keeps its residual: the exact copies of the block's input that tfcheck.probe.value_copies
#: reads as the input itself, then look-alikes that are none (the skip then carries something else).
RESIDUAL_COPIES = {
    "clone": lambda x: x.clone(),  # Megatron-LM, litgpt
    "view": lambda x: x.view(x.shape),
    "expand_as": lambda x: x.expand_as(x),
    "times_one": lambda x: x * 1,
    "clone_of_reshape": lambda x: x.reshape(x.shape).clone(),
    "detach": lambda x: x.detach(),  # the same values, but no gradient back through the skip
    "flip": lambda x: x.flip(1),  # the same shape, the positions reversed
    "overwritten": lambda x: x.clone().zero_(),  # copied, then written over in place
}


class CopiedResidualLM(nn.Module):
    """Megatron-LM's and litgpt's block (the corpus's padded_vocab_gpt.py): the residual kept in a copy of the
    block's input made first, ``residual = copy(x)`` ... ``x = residual + attn(norm(x))`` (Pre-LN) or
    ``x = norm(residual + attn(x))`` (Post-LN). ``copy`` names a RESIDUAL_COPIES entry; ``add_back=False`` is a
    real missing residual: the copy is made and never added."""

    __tfcheck__ = {"kind": "encoder"}

    def __init__(self, copy: str = "clone", pre_ln: bool = True, add_back: bool = True, vocab_size: int = 101,
                 d: int = 32):
        super().__init__()
        self.copy, self.pre_ln, self.add_back = copy, pre_ln, add_back
        self.emb = nn.Embedding(vocab_size, d)
        self.attn = nn.ModuleList(nn.MultiheadAttention(d, 4, batch_first=True) for _ in range(2))
        self.ffn = nn.ModuleList(nn.Sequential(nn.Linear(d, 64), nn.ReLU(), nn.Linear(64, d)) for _ in range(2))
        self.norm1 = nn.ModuleList(nn.LayerNorm(d) for _ in range(2))
        self.norm2 = nn.ModuleList(nn.LayerNorm(d) for _ in range(2))
        self.out = nn.Linear(d, vocab_size)

    def forward(self, input_ids):
        x = self.emb(input_ids)
        for attn, ffn, n1, n2 in zip(self.attn, self.ffn, self.norm1, self.norm2):
            x = self.sublayer(x, n1, lambda h, attn=attn: attn(h, h, h, need_weights=False)[0])
            x = self.sublayer(x, n2, ffn)
        return self.out(x)

    def sublayer(self, x, norm, f):
        residual = RESIDUAL_COPIES[self.copy](x)
        if not self.add_back:
            return f(norm(x)) if self.pre_ln else norm(f(x))
        return residual + f(norm(x)) if self.pre_ln else norm(residual + f(x))

class TrainConfigOptimizers(nn.Module):
    """minGPT's configure_optimizers(train_config): the settings come in a config read by attribute."""

    __tfcheck__ = {"kind": "decoder"}

    def __init__(self, vocab_size: int = 101, d: int = 32):
        super().__init__()
        self.emb, self.out = nn.Embedding(vocab_size, d), nn.Linear(d, vocab_size)

    def configure_optimizers(self, train_config):
        return torch.optim.AdamW(self.parameters(), lr=train_config.learning_rate, betas=train_config.betas,
                                 weight_decay=train_config.weight_decay)

    def forward(self, input_ids):
        return self.out(self.emb(input_ids))


class OptimizersNeedATokenizer(TrainConfigOptimizers):
    """A configure_optimizers tfcheck cannot call: a parameter it has no value for."""

    def configure_optimizers(self, tokenizer):
        return torch.optim.AdamW(self.parameters(), lr=len(tokenizer) * 1e-6)


class UnpicklableAttributeLM(TransformerLM):
    """A correct LM holding an attribute copy.deepcopy refuses (simple-hierarchical-transformer keeps a staticmethod
    object): tfcheck trains a rebuild with its state loaded instead."""

    def __init__(self):
        super().__init__()
        self.activation = staticmethod(F.gelu)


class DropoutOnThePositionTable(nn.Module):
    """Its only dropout is over the position table (1, s, d), broadcast across the batch: in train mode one mask
    serves every sample, so a sample and its copy in one batch agree, while two calls differ. Correct."""

    __tfcheck__ = {"kind": "encoder"}

    def __init__(self, vocab_size=101, d_model=32, max_len=64):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Parameter(torch.randn(1, max_len, d_model) * 0.1)
        self.pos_drop = nn.Dropout(0.1)
        self.layer = nn.Linear(d_model, d_model)

    def forward(self, x):  # (b, s) long
        h = self.embed(x) + self.pos_drop(self.pos[:, :x.shape[1]])
        return h + self.layer(torch.relu(h))
