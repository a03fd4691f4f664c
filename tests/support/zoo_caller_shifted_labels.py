"""A model whose ``labels`` are the next tokens by contract, in the style of recurrent-memory-transformer-pytorch:
the model scores position t's logits against labels[t] with no shift, and the wrapper its authors wrote beside it
prepares the labels (``x, labels = x[:, :-1], x[:, 1:]``) before calling it. The name ``labels`` alone would say
Hugging Face's convention (shifted inside) and the loss would look like UnshiftedLabels' bug; the wrapper's code
says the caller shifts. The same model with no such caller in its file keeps the name's convention."""
from __future__ import annotations

import torch.nn as nn
import torch.nn.functional as F

from reference_model.models import TransformerLM


class NextTokenLabelsLM(TransformerLM):
    def forward(self, tokens, labels=None):
        logits = super().forward(tokens)
        if labels is None:
            return logits
        return logits, F.cross_entropy(logits.flatten(0, 1), labels.flatten())


class Wrapper(nn.Module):
    """What its authors train through: the shift happens here, once."""

    def __init__(self, net: NextTokenLabelsLM):
        super().__init__()
        self.net = net

    def forward(self, x):
        x, labels = x[:, :-1], x[:, 1:]
        return self.net(x, labels=labels)[1]


class UnrelatedLM(TransformerLM):
    """The same loss with no caller that shifts for it (the wrapper above names another class): the name's
    convention holds, and the missing shift is a leak."""

    def forward(self, tokens, labels=None):
        logits = super().forward(tokens)
        if labels is None:
            return logits
        return logits, F.cross_entropy(logits.flatten(0, 1), labels.flatten())
