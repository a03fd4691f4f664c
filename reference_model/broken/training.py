"""Broken training wiring (caught by the training sanity checks: train.*, dropout.eval, norm.placement,
embedding.padding)."""

import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from ..attention import MultiHeadAttention, scaled_dot_product
from ..models import TransformerEncoder, TransformerLM


class _DetachedFFN(nn.Module):
    def __init__(self, ffn):
        super().__init__()
        self.inner = ffn

    def forward(self, x):
        return self.inner(x).detach()  # tfcheck: defect(DetachedFeedForward): the sublayer's output leaves the graph


class DetachedFeedForward(TransformerLM):
    """Every feed-forward sublayer returns ``ffn(x).detach()``: the forward is right, but the FFN weights
    never get a gradient, so half the model never trains.

    Fix: return ffn(x) itself.
    """

    __tfcheck_expect__ = {"check": "train.grad_flow", "row": "param-gets-no-gradient"}

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        for layer in self.layers:
            layer.ffn = _DetachedFFN(layer.ffn)


class _AttentionThrownAway(nn.Module):
    """An encoder layer whose attention output is computed and then dropped (x = norm1(x))."""

    def __init__(self, layer):
        super().__init__()
        self.self_attn, self.ffn, self.norm1, self.norm2 = layer.self_attn, layer.ffn, layer.norm1, layer.norm2

    def forward(self, x, mask=None):
        h = self.self_attn(x, x, x, mask)  # noqa: F841 - the defect: h never joins the stream  # tfcheck: defect(AttentionOutputThrownAway)
        x = self.norm1(x)
        return self.norm2(x + self.ffn(x))


class AttentionOutputThrownAway(TransformerLM):
    """Each layer computes self-attention and throws the result away: shapes are right, every forward
    runs, and the attention weights never train (the model is a bag of positions).

    Fix: x = norm1(x + self_attn(x, x, x, mask)).
    """

    __tfcheck_expect__ = {"check": "train.grad_flow", "row": "param-gets-no-gradient"}

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        self.layers = nn.ModuleList(_AttentionThrownAway(layer) for layer in self.layers)


class _AlwaysDropoutAttention(MultiHeadAttention):
    def attend(self, q, k, v, mask):
        out, weights = scaled_dot_product(q, k, v, mask)
        # The defect: F.dropout's training argument defaults to True, so this runs in eval too.
        return F.dropout(out, self.dropout.p), weights  # tfcheck: defect(DropoutInEval)


class DropoutInEval(TransformerLM):
    """Attention applies ``F.dropout(out, p)`` without ``training=self.training``: inference is random,
    and every evaluation number is noisy.

    Fix: F.dropout(out, p, training=self.training), or an nn.Dropout module.
    """

    __tfcheck_expect__ = {"check": "dropout.eval", "row": "dropout-in-eval"}

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        c = self.config
        for layer in self.layers:
            layer.self_attn = _AlwaysDropoutAttention(c.d_model, c.num_heads, c.dropout)


def constant_lr(optimizer):
    """A schedule with no warmup: the full rate (3e-4) from the first step."""
    for group in optimizer.param_groups:
        group["lr"] = 3e-4
    return LambdaLR(optimizer, lambda step: 1.0)  # tfcheck: defect(PostLNWithoutWarmup)


class PostLNWithoutWarmup(TransformerLM):
    """The paper's Post-LN model trained at a constant 3e-4 from step 0: the declared schedule has no
    warmup, which Post-LN needs (its gradients near the output are large at initialisation).

    Fix: warm up (reference_model.noam_schedule), or norm_first=True (Pre-LN).
    """

    __tfcheck__ = {**TransformerLM.__tfcheck__, "schedule": constant_lr}
    __tfcheck_expect__ = {"check": "norm.placement", "row": "post-ln-without-warmup", "status": "warn"}


class TiedHeadUnitInit(TransformerLM):
    """The output projection is tied to the token embedding, re-initialised N(0, 1): the logits have std
    ~sqrt(d_model) at initialisation and the first loss is far above ln(vocab_size).

    Fix: initialise the tied table with std d_model**-0.5 (or 0.02).
    """

    __tfcheck_expect__ = {"check": "train.loss_at_init", "row": "loss-at-init-high", "status": "warn"}

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        self.lm_head = nn.Linear(self.config.d_model, self.config.vocab_size, bias=False)
        self.lm_head.weight = self.embed.embedding.weight
        nn.init.normal_(self.embed.embedding.weight, std=1.0)  # the defect  # tfcheck: defect


class UnshiftedLabels(TransformerLM):
    """``forward(tokens, labels=None)`` computes the loss of position t's logits against labels[t], with
    labels = tokens (Hugging Face convention) but no shift: the model learns to copy its input, the
    training loss looks excellent, and generation is garbage.

    Fix: F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten()).
    """

    __tfcheck_expect__ = {"check": "train.target_leak", "row": "targets-not-shifted"}

    def forward(self, tokens, labels=None):
        logits = super().forward(tokens)
        if labels is None:
            return logits
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten())  # the defect: no shift  # tfcheck: defect
        return logits, loss


class DetachedOutput(TransformerLM):
    """``forward`` returns ``logits.detach()`` (a leftover of a debugging session): every forward is right
    and nothing can train.

    Fix: return the logits with their graph.
    """

    __tfcheck_expect__ = {"check": "train.overfit_batch", "row": "cannot-overfit-one-batch"}

    def forward(self, tokens):
        return super().forward(tokens).detach()  # tfcheck: defect


class FrozenByMistake(TransformerLM):
    """Every parameter is frozen (requires_grad=False, e.g. a freeze meant for the embedding applied to
    model.parameters()): the optimiser has nothing to update.

    Fix: freeze only what must stay fixed.
    """

    __tfcheck_expect__ = {"check": "train.overfit_batch", "row": "cannot-overfit-one-batch"}

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        for p in self.parameters():
            p.requires_grad_(False)  # tfcheck: defect


class PadTokenIsAnOrdinaryToken(TransformerEncoder):
    """The token embedding has no padding_idx (its pad row is random and trains) and no padding mask is
    built, so whatever the pad vector learns reaches every real token of a padded batch.

    Fix: nn.Embedding(vocab, d_model, padding_idx=pad_id) and mask padding as keys.
    """

    __tfcheck_expect__ = {"check": "embedding.padding", "row": "pad-embedding-not-ignored", "status": "warn"}

    def __init__(self, config=None, **overrides):
        super().__init__(config, **overrides)
        self.embed.embedding.padding_idx = None  # tfcheck: defect
        with torch.no_grad():
            self.embed.embedding.weight[self.config.pad_id].normal_(std=self.config.d_model ** -0.5)  # tfcheck: defect

    def forward(self, tokens):
        x = self.dropout(self.pos(self.embed(tokens)))
        for layer in self.layers:
            x = layer(x, None)  # the pad token is attended like any other
        return self.norm(x)
