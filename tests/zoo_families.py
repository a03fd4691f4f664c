"""Correct models in the styles people actually write, one per family, built small: torch.nn used as its
documentation shows, x-transformers, the Annotated-Transformer tutorial, a bare attention module, and
Hugging Face models from small configs (random weights, nothing downloaded). The integration tests run
the whole battery on each and inject one defect into each to show the battery is looking."""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB, D, HEADS, LAYERS, FF, MAX_LEN = 97, 32, 4, 2, 64, 64


def _seed(seed: int = 0) -> None:
    torch.manual_seed(seed)


# ----- torch.nn, as its documentation uses it ---------------------------------------------------------

def nn_transformer(batch_first: bool = True) -> nn.Transformer:
    """nn.Transformer itself: forward(src, tgt, ..., tgt_mask=None, src_key_padding_mask=None, ...) on
    features; the caller passes the causal tgt_mask."""
    _seed()
    return nn.Transformer(d_model=D, nhead=HEADS, num_encoder_layers=LAYERS, num_decoder_layers=LAYERS,
                          dim_feedforward=FF, batch_first=batch_first)


def nn_transformer_seq_first() -> nn.Transformer:
    """torch's default layout: (length, batch, d_model)."""
    return nn_transformer(batch_first=False)


def nn_encoder() -> nn.TransformerEncoder:
    _seed()
    layer = nn.TransformerEncoderLayer(d_model=D, nhead=HEADS, dim_feedforward=FF, batch_first=True)
    return nn.TransformerEncoder(layer, num_layers=LAYERS, enable_nested_tensor=False)


class _SinusoidalPositions(nn.Module):
    """The PyTorch tutorials' PositionalEncoding, batch first."""

    def __init__(self, d_model: int, max_len: int = MAX_LEN):
        super().__init__()
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)

    def forward(self, x):  # (b, s, d)
        return x + self.pe[: x.size(1)]


class TorchTokenEncoder(nn.Module):
    """An encoder as torch documents it: embedding * sqrt(d_model) + positions, nn.TransformerEncoder,
    forward(src, src_key_padding_mask=None) with True = padding."""

    def __init__(self, ntoken: int = VOCAB, d_model: int = D, nhead: int = HEADS, nlayers: int = LAYERS):
        super().__init__()
        _seed()
        self.d_model = d_model
        self.embedding = nn.Embedding(ntoken, d_model)
        self.pos_encoder = _SinusoidalPositions(d_model)
        layer = nn.TransformerEncoderLayer(d_model, nhead, FF, dropout=0.1, batch_first=True)
        self.transformer_encoder = nn.TransformerEncoder(layer, nlayers, enable_nested_tensor=False)

    def forward(self, src, src_key_padding_mask=None):  # src (b, s) long
        x = self.pos_encoder(self.embedding(src) * math.sqrt(self.d_model))
        return self.transformer_encoder(x, src_key_padding_mask=src_key_padding_mask)


class TorchCausalLM(nn.Module):
    """A decoder-only LM on nn.TransformerEncoder, as torch's language-modelling tutorial builds it: the
    causal mask from nn.Transformer.generate_square_subsequent_mask, with is_causal=True as the hint."""

    def __init__(self, ntoken: int = VOCAB, d_model: int = D, nhead: int = HEADS, nlayers: int = LAYERS):
        super().__init__()
        _seed()
        self.d_model = d_model
        self.embedding = nn.Embedding(ntoken, d_model)
        self.pos_encoder = _SinusoidalPositions(d_model)
        layer = nn.TransformerEncoderLayer(d_model, nhead, FF, dropout=0.1, batch_first=True)
        self.transformer_encoder = nn.TransformerEncoder(layer, nlayers, enable_nested_tensor=False)
        self.linear = nn.Linear(d_model, ntoken)
        self.__tfcheck__ = {"kind": "decoder"}

    def forward(self, src, src_key_padding_mask=None):  # src (b, s) long
        causal = nn.Transformer.generate_square_subsequent_mask(src.size(1), device=src.device)
        x = self.pos_encoder(self.embedding(src) * math.sqrt(self.d_model))
        x = self.transformer_encoder(x, mask=causal, src_key_padding_mask=src_key_padding_mask, is_causal=True)
        return self.linear(x)


def nn_multihead_attention() -> nn.MultiheadAttention:
    """A bare nn.MultiheadAttention: forward(query, key, value, key_padding_mask=None, ...) -> (out, weights)."""
    _seed()
    return nn.MultiheadAttention(D, HEADS, batch_first=True)


def nn_multihead_attention_seq_first() -> nn.MultiheadAttention:
    _seed()
    return nn.MultiheadAttention(D, HEADS)


# ----- the tutorial style of the Annotated Transformer ------------------------------------------------

def _clones(module: nn.Module, n: int) -> nn.ModuleList:
    import copy

    return nn.ModuleList(copy.deepcopy(module) for _ in range(n))


def tutorial_attention(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    return scores.softmax(dim=-1) @ value


class TutorialMultiHeadedAttention(nn.Module):
    """forward(query, key, value, mask=None); mask is a keep mask broadcastable to (b, h, s_q, s_k),
    (b, 1, 1, s) for padding."""

    def __init__(self, h: int = HEADS, d_model: int = D):
        super().__init__()
        self.d_k, self.h = d_model // h, h
        self.linears = _clones(nn.Linear(d_model, d_model), 4)

    def forward(self, query, key, value, mask=None):
        b = query.size(0)
        q, k, v = (lin(x).view(b, -1, self.h, self.d_k).transpose(1, 2)
                   for lin, x in zip(self.linears, (query, key, value)))
        x = tutorial_attention(q, k, v, mask)
        return self.linears[-1](x.transpose(1, 2).contiguous().view(b, -1, self.h * self.d_k))


class _TutorialSublayer(nn.Module):
    def __init__(self, size: int):
        super().__init__()
        self.norm = nn.LayerNorm(size)

    def forward(self, x, sublayer):
        return x + sublayer(self.norm(x))


class _FeedForward(nn.Module):
    def __init__(self, d_model: int = D, d_ff: int = FF):
        super().__init__()
        self.w_1, self.w_2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.w_2(self.w_1(x).relu())


class _TutorialEncoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn, self.feed_forward = TutorialMultiHeadedAttention(), _FeedForward()
        self.sublayer = _clones(_TutorialSublayer(D), 2)

    def forward(self, x, mask):
        x = self.sublayer[0](x, lambda x: self.self_attn(x, x, x, mask))
        return self.sublayer[1](x, self.feed_forward)


class _TutorialDecoderLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn, self.src_attn = TutorialMultiHeadedAttention(), TutorialMultiHeadedAttention()
        self.feed_forward = _FeedForward()
        self.sublayer = _clones(_TutorialSublayer(D), 3)

    def forward(self, x, memory, src_mask, tgt_mask):
        x = self.sublayer[0](x, lambda x: self.self_attn(x, x, x, tgt_mask))
        x = self.sublayer[1](x, lambda x: self.src_attn(x, memory, memory, src_mask))
        return self.sublayer[2](x, self.feed_forward)


class _Embeddings(nn.Module):
    def __init__(self, vocab: int = VOCAB, d_model: int = D):
        super().__init__()
        self.lut, self.d_model = nn.Embedding(vocab, d_model), d_model
        self.pos = _SinusoidalPositions(d_model)

    def forward(self, x):
        return self.pos(self.lut(x) * math.sqrt(self.d_model))


class TutorialEncoder(nn.Module):
    """The Annotated Transformer's encoder: forward(x, mask) with mask a (b, 1, 1, s) keep mask."""

    def __init__(self):
        super().__init__()
        _seed()
        self.embed = _Embeddings()
        self.layers = _clones(_TutorialEncoderLayer(), LAYERS)
        self.norm = nn.LayerNorm(D)

    def forward(self, x, mask):
        x = self.embed(x)
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)


def subsequent_mask(size: int, device=None) -> torch.Tensor:
    """(1, size, size) keep mask: True on and below the diagonal."""
    return torch.ones(1, size, size, dtype=torch.bool, device=device).tril()


class TutorialEncoderDecoder(nn.Module):
    """The Annotated Transformer's EncoderDecoder: forward(src, tgt, src_mask, tgt_mask), src_mask
    (b, 1, 1, s) keep, tgt_mask the (b, 1, t, t) keep mask of padding and subsequent positions."""

    def __init__(self):
        super().__init__()
        _seed()
        self.src_embed, self.tgt_embed = _Embeddings(), _Embeddings()
        self.encoder_layers = _clones(_TutorialEncoderLayer(), LAYERS)
        self.decoder_layers = _clones(_TutorialDecoderLayer(), LAYERS)
        self.enc_norm, self.dec_norm = nn.LayerNorm(D), nn.LayerNorm(D)
        self.generator = nn.Linear(D, VOCAB)

    def encode(self, src, src_mask):
        x = self.src_embed(src)
        for layer in self.encoder_layers:
            x = layer(x, src_mask)
        return self.enc_norm(x)

    def decode(self, memory, src_mask, tgt, tgt_mask):
        x = self.tgt_embed(tgt)
        for layer in self.decoder_layers:
            x = layer(x, memory, src_mask, tgt_mask)
        return self.dec_norm(x)

    def forward(self, src, tgt, src_mask, tgt_mask):
        return self.generator(self.decode(self.encode(src, src_mask), src_mask, tgt, tgt_mask))


def tutorial_attention_module() -> TutorialMultiHeadedAttention:
    _seed()
    return TutorialMultiHeadedAttention()


# ----- x-transformers ---------------------------------------------------------------------------------

def x_decoder():
    from x_transformers import Decoder, TransformerWrapper

    _seed()
    return TransformerWrapper(num_tokens=VOCAB, max_seq_len=MAX_LEN,
                              attn_layers=Decoder(dim=D, depth=LAYERS, heads=HEADS, attn_dim_head=D // HEADS))


def x_encoder():
    from x_transformers import Encoder, TransformerWrapper

    _seed()
    return TransformerWrapper(num_tokens=VOCAB, max_seq_len=MAX_LEN,
                              attn_layers=Encoder(dim=D, depth=LAYERS, heads=HEADS, attn_dim_head=D // HEADS))


def x_decoder_rotary():
    """Rotary positions instead of absolute ones."""
    from x_transformers import Decoder, TransformerWrapper

    _seed()
    return TransformerWrapper(num_tokens=VOCAB, max_seq_len=MAX_LEN, use_abs_pos_emb=False,
                              attn_layers=Decoder(dim=D, depth=LAYERS, heads=HEADS, attn_dim_head=D // HEADS,
                                                  rotary_pos_emb=True))


# ----- Hugging Face from small configs ----------------------------------------------------------------

def _hf(model_cls: str, config_cls: str, **sizes):
    import transformers

    _seed()
    config = getattr(transformers, config_cls)(**sizes)
    return getattr(transformers, model_cls)(config)


def distilbert():
    return _hf("DistilBertModel", "DistilBertConfig", vocab_size=VOCAB, dim=D, n_layers=LAYERS, n_heads=HEADS,
               hidden_dim=FF, max_position_embeddings=MAX_LEN)


def roberta():
    return _hf("RobertaModel", "RobertaConfig", vocab_size=VOCAB, hidden_size=D, num_hidden_layers=LAYERS,
               num_attention_heads=HEADS, intermediate_size=FF, max_position_embeddings=MAX_LEN + 2)


def bart():
    return _hf("BartForConditionalGeneration", "BartConfig", vocab_size=VOCAB, d_model=D, encoder_layers=LAYERS,
               decoder_layers=LAYERS, encoder_attention_heads=HEADS, decoder_attention_heads=HEADS,
               encoder_ffn_dim=FF, decoder_ffn_dim=FF, max_position_embeddings=MAX_LEN)
