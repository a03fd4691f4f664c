"""The three Transformer shapes: encoder-only, decoder-only LM, encoder-decoder.

Every model builds its own masks inside ``forward`` from ``config.pad_id``; the
caller passes token ids only. Masks are boolean KEEP masks (True = may attend).
"""

import dataclasses
import functools
from dataclasses import dataclass

import torch
from torch import nn

from .layers import DecoderLayer, EncoderLayer, SinusoidalPositionalEncoding, TokenEmbedding
from .schedule import noam_schedule

#: The spec of the paper's schedule, as the models declare it to tfcheck.
NOAM = "reference_model:noam_schedule"


# Configs are frozen: the modules are built from them once, so mutating a
# config afterwards would make it lie about the model.
@dataclass(frozen=True)
class EncoderConfig:
    vocab_size: int = 101  # token ids are in [0, vocab_size)
    d_model: int = 32  # residual stream width
    num_heads: int = 4  # must divide d_model
    num_layers: int = 2
    d_ff: int = 64  # hidden width of the feed-forward sublayer
    max_len: int = 64  # longest sequence the positional table covers
    dropout: float = 0.1
    pad_id: int = 0  # padding token; masked out as a key
    norm_first: bool = False  # False: Post-LN (the paper); True: Pre-LN + final LayerNorm


@dataclass(frozen=True)
class LMConfig:
    vocab_size: int = 101  # token ids are in [0, vocab_size)
    d_model: int = 32  # residual stream width
    num_heads: int = 4  # must divide d_model
    num_layers: int = 2
    d_ff: int = 64  # hidden width of the feed-forward sublayer
    max_len: int = 64  # longest sequence the positional table covers
    dropout: float = 0.1
    pad_id: int = 0  # padding token; masked out as a key
    norm_first: bool = False  # False: Post-LN (the paper); True: Pre-LN + final LayerNorm


@dataclass(frozen=True)
class Seq2SeqConfig:
    src_vocab_size: int = 101  # source token ids are in [0, src_vocab_size)
    tgt_vocab_size: int = 101  # target token ids and output logits
    d_model: int = 32  # residual stream width
    num_heads: int = 4  # must divide d_model
    num_encoder_layers: int = 2
    num_decoder_layers: int = 2
    d_ff: int = 64  # hidden width of the feed-forward sublayer
    max_len: int = 64  # longest source or target sequence
    dropout: float = 0.1
    pad_id: int = 0  # padding token in both vocabularies
    norm_first: bool = False  # False: Post-LN (the paper); True: Pre-LN + final LayerNorm

    @property
    def vocab_size(self):
        """The shared vocabulary size, for tools that expect one; only defined when
        source and target vocabularies have the same size."""
        if self.src_vocab_size != self.tgt_vocab_size:
            raise AttributeError(
                "vocab_size is ambiguous: src_vocab_size != tgt_vocab_size; "
                "read those fields instead"
            )
        return self.tgt_vocab_size


def _resolve_config(config_cls, config, overrides):
    config = config_cls() if config is None else config
    valid = [f.name for f in dataclasses.fields(config_cls)]
    unknown = sorted(set(overrides) - set(valid))
    if unknown:
        raise TypeError(
            f"unknown {config_cls.__name__} field(s) {unknown}; valid fields: {valid}"
        )
    return dataclasses.replace(config, **overrides)


def padding_mask(tokens, pad_id):
    """Keep mask over keys, True = real token. (b, s) -> (b, 1, 1, s)."""
    return (tokens != pad_id)[:, None, None, :]


def causal_mask(s, device):
    """Keep mask, True on and below the diagonal: each position may attend to
    itself and the past, never the future. -> (s, s)"""
    return torch.tril(torch.ones(s, s, dtype=torch.bool, device=device))


class _Model(nn.Module):
    config_cls = None

    def __init__(self, config, overrides):
        super().__init__()
        self._config = _resolve_config(self.config_cls, config, overrides)
        # The class-level declaration states the defaults; the instance copy
        # follows an overridden pad_id so the declaration never lies.
        self.__tfcheck__ = {**type(self).__tfcheck__, "pad_id": self._config.pad_id}
        if self.__tfcheck__.get("schedule") == NOAM:  # the paper's schedule for this model's width, for lr.warmup
            self.__tfcheck__["schedule"] = functools.partial(noam_schedule, d_model=self._config.d_model)

    @property
    def config(self):
        return self._config


class TransformerEncoder(_Model):
    """Encoder-only Transformer. forward(tokens (b, s) long) -> hidden states (b, s, d_model)."""

    __tfcheck__ = {"kind": "encoder", "causal": False, "mask": "internal", "pad_id": 0, "output": "tensor",
                   "schedule": NOAM}
    config_cls = EncoderConfig

    def __init__(self, config=None, **overrides):
        super().__init__(config, overrides)
        c = self.config
        self.embed = TokenEmbedding(c.vocab_size, c.d_model, c.pad_id)
        self.pos = SinusoidalPositionalEncoding(c.d_model, c.max_len)
        self.dropout = nn.Dropout(c.dropout)
        self.layers = nn.ModuleList(
            EncoderLayer(c.d_model, c.num_heads, c.d_ff, c.dropout, c.norm_first)
            for _ in range(c.num_layers)
        )
        # Pre-LN leaves the residual stream un-normalised; Post-LN already ends in a norm.
        self.norm = nn.LayerNorm(c.d_model) if c.norm_first else nn.Identity()

    def forward(self, tokens):  # (b, s) long
        mask = padding_mask(tokens, self.config.pad_id)  # (b, 1, 1, s)
        x = self.dropout(self.pos(self.embed(tokens)))  # (b, s, d_model)
        for layer in self.layers:
            x = layer(x, mask)  # (b, s, d_model)
        return self.norm(x)  # (b, s, d_model)


class TransformerLM(_Model):
    """Decoder-only causal LM. forward(tokens (b, s) long) -> logits (b, s, vocab_size).

    Structurally the encoder stack (self-attention + FFN, no cross-attention)
    run under a causal mask, followed by a vocabulary projection.
    """

    __tfcheck__ = {"kind": "decoder", "causal": True, "mask": "internal", "pad_id": 0, "output": "tensor",
                   "schedule": NOAM}
    config_cls = LMConfig

    def __init__(self, config=None, **overrides):
        super().__init__(config, overrides)
        c = self.config
        self.embed = TokenEmbedding(c.vocab_size, c.d_model, c.pad_id)
        self.pos = SinusoidalPositionalEncoding(c.d_model, c.max_len)
        self.dropout = nn.Dropout(c.dropout)
        self.layers = nn.ModuleList(
            EncoderLayer(c.d_model, c.num_heads, c.d_ff, c.dropout, c.norm_first)
            for _ in range(c.num_layers)
        )
        self.norm = nn.LayerNorm(c.d_model) if c.norm_first else nn.Identity()
        self.lm_head = nn.Linear(c.d_model, c.vocab_size)

    def build_mask(self, tokens):  # (b, s) long
        """Padding keep mask & causal keep mask -> (b, 1, s, s)."""
        return padding_mask(tokens, self.config.pad_id) & causal_mask(tokens.size(1), tokens.device)

    def forward(self, tokens):  # (b, s) long
        mask = self.build_mask(tokens)  # (b, 1, s, s)
        x = self.dropout(self.pos(self.embed(tokens)))  # (b, s, d_model)
        for layer in self.layers:
            x = layer(x, mask)  # (b, s, d_model)
        return self.lm_head(self.norm(x))  # (b, s, vocab_size)


class Seq2SeqTransformer(_Model):
    """Encoder-decoder Transformer, as in the paper.

    forward(src (b, s) long, tgt (b, t) long) -> logits (b, t, tgt_vocab_size).
    ``tgt`` is the decoder input (already shifted right by the caller).
    """

    __tfcheck__ = {"kind": "seq2seq", "causal": True, "mask": "internal", "pad_id": 0, "output": "tensor",
                   "schedule": NOAM}
    config_cls = Seq2SeqConfig

    def __init__(self, config=None, **overrides):
        super().__init__(config, overrides)
        c = self.config
        self.src_embed = TokenEmbedding(c.src_vocab_size, c.d_model, c.pad_id)
        self.tgt_embed = TokenEmbedding(c.tgt_vocab_size, c.d_model, c.pad_id)
        self.pos = SinusoidalPositionalEncoding(c.d_model, c.max_len)  # parameter-free, so shared
        self.dropout = nn.Dropout(c.dropout)
        self.encoder_layers = nn.ModuleList(
            EncoderLayer(c.d_model, c.num_heads, c.d_ff, c.dropout, c.norm_first)
            for _ in range(c.num_encoder_layers)
        )
        self.decoder_layers = nn.ModuleList(
            DecoderLayer(c.d_model, c.num_heads, c.d_ff, c.dropout, c.norm_first)
            for _ in range(c.num_decoder_layers)
        )
        self.encoder_norm = nn.LayerNorm(c.d_model) if c.norm_first else nn.Identity()
        self.decoder_norm = nn.LayerNorm(c.d_model) if c.norm_first else nn.Identity()
        self.generator = nn.Linear(c.d_model, c.tgt_vocab_size)

    def encode(self, src):  # (b, s) long
        """-> memory (b, s, d_model)."""
        mask = padding_mask(src, self.config.pad_id)  # (b, 1, 1, s)
        x = self.dropout(self.pos(self.src_embed(src)))  # (b, s, d_model)
        for layer in self.encoder_layers:
            x = layer(x, mask)
        return self.encoder_norm(x)  # (b, s, d_model)

    def decode(self, tgt, memory, src):
        """tgt (b, t) long, memory (b, s, d_model), src (b, s) long -> logits (b, t, tgt_vocab_size).

        ``src`` is needed only for its padding: cross-attention must not look at
        padded memory positions.
        """
        pad_id = self.config.pad_id
        self_mask = padding_mask(tgt, pad_id) & causal_mask(tgt.size(1), tgt.device)  # (b, 1, t, t)
        memory_mask = padding_mask(src, pad_id)  # (b, 1, 1, s)
        x = self.dropout(self.pos(self.tgt_embed(tgt)))  # (b, t, d_model)
        for layer in self.decoder_layers:
            x = layer(x, memory, self_mask, memory_mask)  # (b, t, d_model)
        return self.generator(self.decoder_norm(x))  # (b, t, tgt_vocab_size)

    def forward(self, src, tgt):
        return self.decode(tgt, self.encode(src), src)  # (b, t, tgt_vocab_size)
