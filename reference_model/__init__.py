"""A small, readable reference implementation of the Transformer of
"Attention Is All You Need" (Vaswani et al., 2017), used as a known-good
subject for tfcheck. ``reference_model.broken`` holds deliberately broken
variants, one defect each, that tfcheck must catch.

All masks are boolean KEEP masks: True = may attend.
"""

from .attention import MultiHeadAttention
from .models import (
    EncoderConfig,
    LMConfig,
    Seq2SeqConfig,
    Seq2SeqTransformer,
    TransformerEncoder,
    TransformerLM,
)
from .schedule import noam_lr, noam_schedule

__all__ = [
    "TransformerEncoder",
    "TransformerLM",
    "Seq2SeqTransformer",
    "EncoderConfig",
    "LMConfig",
    "Seq2SeqConfig",
    "MultiHeadAttention",
    "noam_lr",
    "noam_schedule",
]
