"""A from-scratch seq2seq with every argument positional and required, named as its author wrote them:
Transformer(src_pad_idx, trg_pad_idx, trg_sos_idx, enc_voc_size, dec_voc_size, d_model, n_head, max_len,
ffn_hidden, n_layers, drop_prob, device); forward(src, trg) builds both masks from the pad ids. The positional
table is a plain tensor made on ``device`` (``.to()`` would not move it)."""
import torch
import torch.nn as nn
from frontdoor_blocks import Block, leak, sinusoids


class TransformerEmbedding(nn.Module):
    def __init__(self, vocab_size, d_model, max_len, drop_prob, device, pad_idx):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab_size, d_model, padding_idx=pad_idx)
        self.encoding = sinusoids(max_len, d_model, device=device)  # not a buffer, as the original
        self.drop_out = nn.Dropout(p=drop_prob)

    def forward(self, x):
        return self.drop_out(self.tok_emb(x) + self.encoding[: x.size(1)])


class Transformer(nn.Module):
    def __init__(self, src_pad_idx, trg_pad_idx, trg_sos_idx, enc_voc_size, dec_voc_size, d_model, n_head, max_len,
                 ffn_hidden, n_layers, drop_prob, device):
        super().__init__()
        self.src_pad_idx, self.trg_pad_idx, self.trg_sos_idx = src_pad_idx, trg_pad_idx, trg_sos_idx
        self.device = device
        self.enc_emb = TransformerEmbedding(enc_voc_size, d_model, max_len, drop_prob, device, src_pad_idx)
        self.dec_emb = TransformerEmbedding(dec_voc_size, d_model, max_len, drop_prob, device, trg_pad_idx)
        self.encoder = nn.ModuleList(Block(d_model, n_head, ffn_hidden, drop_prob) for _ in range(n_layers))
        self.decoder = nn.ModuleList(Block(d_model, n_head, ffn_hidden, drop_prob, cross=True, decoder_self=True)
                                     for _ in range(n_layers))
        self.linear = nn.Linear(d_model, dec_voc_size)

    def forward(self, src, trg):
        src_mask = self.make_src_mask(src)
        trg_mask = self.make_trg_mask(trg)
        enc = self.enc_emb(src)
        for layer in self.encoder:
            enc = layer(enc, src_mask)
        dec = self.dec_emb(trg)
        for layer in self.decoder:
            dec = layer(dec, trg_mask, enc, src_mask)
        return self.linear(dec)

    def make_src_mask(self, src):
        return (src != self.src_pad_idx).unsqueeze(1).unsqueeze(2)

    def make_trg_mask(self, trg):
        trg_pad_mask = (trg != self.trg_pad_idx).unsqueeze(1).unsqueeze(3)
        trg_len = trg.shape[1]
        trg_sub_mask = torch.tril(torch.ones(trg_len, trg_len)).type(torch.ByteTensor).to(self.device)
        return trg_pad_mask & trg_sub_mask


class LeakyTransformer(Transformer):
    def __init__(self, src_pad_idx, trg_pad_idx, trg_sos_idx, enc_voc_size, dec_voc_size, d_model, n_head, max_len,
                 ffn_hidden, n_layers, drop_prob, device):
        super().__init__(src_pad_idx, trg_pad_idx, trg_sos_idx, enc_voc_size, dec_voc_size, d_model, n_head, max_len,
                         ffn_hidden, n_layers, drop_prob, device)
        leak(self)
