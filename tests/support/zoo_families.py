"""Correct models in the styles people actually write, built small: torch.nn used as its documentation
shows, the tutorial style (the Annotated Transformer and its kin), nanoGPT's model.py, x-transformers and
bare attention modules. (Hugging Face models need no copy: tfcheck builds them from small configs.)
tests/integration/test_model_families.py runs the whole battery on each, and injects one defect into each."""
from __future__ import annotations

import math
from dataclasses import dataclass

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
        self.embedding.weight.data.uniform_(-0.1, 0.1)  # the tutorial's init_weights

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
        self.embedding.weight.data.uniform_(-0.1, 0.1)  # the tutorial's init_weights
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


# ----- the tutorial style: the caller builds the masks, laid out for the attention scores -------------

def _clones(module: nn.Module, n: int) -> nn.ModuleList:
    import copy

    return nn.ModuleList(copy.deepcopy(module) for _ in range(n))


def _xavier(model: nn.Module) -> nn.Module:
    """The Annotated Transformer's make_model initialisation."""
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    return model


def tutorial_attention(query, key, value, mask=None):
    d_k = query.size(-1)
    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    return scores.softmax(dim=-1) @ value


class TutorialMultiHeadedAttention(nn.Module):
    """forward(query, key, value, mask=None): a keep mask broadcastable to the (b, h, s_q, s_k) scores,
    (b, 1, 1, s) for padding. With ``heads_axis`` (the Annotated Transformer) the mask comes without the
    heads axis, (b, 1, s) or (b, t, t), and gets it here."""

    def __init__(self, h: int = HEADS, d_model: int = D, heads_axis: bool = False):
        super().__init__()
        self.d_k, self.h, self.heads_axis = d_model // h, h, heads_axis
        self.linears = _clones(nn.Linear(d_model, d_model), 4)

    def forward(self, query, key, value, mask=None):
        if mask is not None and self.heads_axis:
            mask = mask.unsqueeze(1)  # the same mask for every head
        b = query.size(0)
        q, k, v = (lin(x).view(b, -1, self.h, self.d_k).transpose(1, 2)
                   for lin, x in zip(self.linears, (query, key, value)))
        x = tutorial_attention(q, k, v, mask)
        return self.linears[-1](x.transpose(1, 2).contiguous().view(b, -1, self.h * self.d_k))


class _Sublayer(nn.Module):
    """Pre-LN residual, as the Annotated Transformer's SublayerConnection."""

    def __init__(self, size: int = D):
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


class _EncoderLayer(nn.Module):
    def __init__(self, heads_axis: bool):
        super().__init__()
        self.self_attn = TutorialMultiHeadedAttention(heads_axis=heads_axis)
        self.feed_forward = _FeedForward()
        self.sublayer = _clones(_Sublayer(), 2)

    def forward(self, x, mask):
        x = self.sublayer[0](x, lambda x: self.self_attn(x, x, x, mask))
        return self.sublayer[1](x, self.feed_forward)


class _DecoderLayer(nn.Module):
    def __init__(self, heads_axis: bool):
        super().__init__()
        self.self_attn = TutorialMultiHeadedAttention(heads_axis=heads_axis)
        self.src_attn = TutorialMultiHeadedAttention(heads_axis=heads_axis)
        self.feed_forward = _FeedForward()
        self.sublayer = _clones(_Sublayer(), 3)

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
    """A from-scratch tutorial's encoder: forward(src, src_mask), src_mask = (src != pad)[:, None, None, :],
    a (b, 1, 1, s) keep mask."""

    def __init__(self):
        super().__init__()
        _seed()
        self.embed = _Embeddings()
        self.layers = _clones(_EncoderLayer(heads_axis=False), LAYERS)
        self.norm = nn.LayerNorm(D)
        _xavier(self)

    def forward(self, src, src_mask):
        x = self.embed(src)
        for layer in self.layers:
            x = layer(x, src_mask)
        return self.norm(x)


class AnnotatedEncoderDecoder(nn.Module):
    """The Annotated Transformer's EncoderDecoder: forward(src, tgt, src_mask, tgt_mask) with
    src_mask = (src != pad).unsqueeze(-2), (b, 1, s), and tgt_mask = (tgt != pad).unsqueeze(-2) &
    subsequent_mask(t), (b, t, t); its attention adds the heads axis."""

    def __init__(self):
        super().__init__()
        _seed()
        self.src_embed, self.tgt_embed = _Embeddings(), _Embeddings()
        self.encoder_layers = _clones(_EncoderLayer(heads_axis=True), LAYERS)
        self.decoder_layers = _clones(_DecoderLayer(heads_axis=True), LAYERS)
        self.enc_norm, self.dec_norm = nn.LayerNorm(D), nn.LayerNorm(D)
        self.generator = nn.Linear(D, VOCAB)
        _xavier(self)

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
    """A bare attention module: forward(query, key, value, mask=None)."""
    _seed()
    return TutorialMultiHeadedAttention()


# ----- nanoGPT, as Karpathy's model.py writes it -------------------------------------------------------

@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50304
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True


class _CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout, self.resid_dropout = nn.Dropout(config.dropout), nn.Dropout(config.dropout)
        self.n_head, self.n_embd, self.dropout = config.n_head, config.n_embd, config.dropout

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=self.dropout if self.training else 0,
                                           is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class _MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x))))


class _Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(config.n_embd, bias=config.bias), _CausalSelfAttention(config)
        self.ln_2, self.mlp = nn.LayerNorm(config.n_embd, bias=config.bias), _MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """nanoGPT: GPT(config), forward(idx, targets=None) -> (logits, loss); without targets only the last
    position's logits (its generation shortcut)."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        _seed()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([_Block(config) for _ in range(config.n_layer)]),
            ln_f=nn.LayerNorm(config.n_embd, bias=config.bias),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        assert t <= self.config.block_size, f"Cannot forward length {t}, block size is only {self.config.block_size}"
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if targets is not None:
            logits = self.lm_head(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        else:
            logits = self.lm_head(x[:, [-1], :])  # note: using list [-1] to preserve the time dim
            loss = None
        return logits, loss

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0):
        for _ in range(max_new_tokens):
            logits, _ = self(idx[:, -self.config.block_size:])
            probs = F.softmax(logits[:, -1, :] / temperature, dim=-1)
            idx = torch.cat((idx, torch.multinomial(probs, num_samples=1)), dim=1)
        return idx


class _ParallelBlock(_Block):
    """GPT-J / Falcon's parallel block, written the way Falcon does: the MLP's output accumulates the
    attention's in place, then joins the stream once."""

    def __init__(self, config: GPTConfig):
        super().__init__(config)
        del self.ln_2  # one norm feeds both branches

    def forward(self, x):
        h = self.ln_1(x)
        out = self.mlp(h)
        out += self.attn(h)
        return x + out


class ParallelGPT(GPT):
    """nanoGPT with parallel attention and MLP blocks (x + attn(ln(x)) + mlp(ln(x)))."""

    def __init__(self, config: GPTConfig):
        super().__init__(config)
        _seed()
        self.transformer.h = nn.ModuleList([_ParallelBlock(config) for _ in range(config.n_layer)])


def hf_eager(cls_name: str, **sizes):
    """A Hugging Face model with eager attention (what output_attentions needs): explicit scores plus an
    additive 4-d mask, which must not pass for a residual add."""
    import transformers

    cls = getattr(transformers, cls_name)
    _seed()
    return cls(cls.config_class(vocab_size=VOCAB, attn_implementation="eager", **sizes))


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
                                                  rotary_pos_emb=True, verbose=False))  # small heads: no advice


class _OneSumBlock(_Block):
    """Cohere's parallel block: both branches computed first, then joined to the stream in one expression,
    residual + attention + mlp (two adds, the second of which adds the MLP to a sum)."""

    def __init__(self, config: GPTConfig):
        super().__init__(config)
        del self.ln_2

    def forward(self, x):
        h = self.ln_1(x)
        attention = self.attn(h)
        mlp = self.mlp(h)
        return x + attention + mlp


class OneSumParallelGPT(GPT):
    """nanoGPT with Cohere-style parallel blocks (x + attn(ln(x)) + mlp(ln(x)), branches computed first)."""

    def __init__(self, config: GPTConfig):
        super().__init__(config)
        _seed()
        self.transformer.h = nn.ModuleList([_OneSumBlock(config) for _ in range(config.n_layer)])
