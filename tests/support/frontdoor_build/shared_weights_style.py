"""A seq2seq with pattern-named arguments and large defaults: Transformer(n_src_vocab, n_trg_vocab, src_pad_idx,
trg_pad_idx, d_word_vec=512, d_model=512, d_inner=2048, n_layers=6, n_head=8, d_k=64, d_v=64, dropout=0.1,
n_position=200, ...), asserting d_model == d_word_vec and sharing its embeddings; forward(src, trg) builds the
masks from the pad ids (the original names them src_seq, trg_seq: calling it is not construction's business).
Attention is scaled by its own d_k, given separately."""
import torch
import torch.nn as nn
from frontdoor_blocks import Block, leak, sinusoids


def get_pad_mask(seq, pad_idx):
    return (seq != pad_idx).unsqueeze(-2)


def get_subsequent_mask(seq):
    sz_b, len_s = seq.size()
    return (1 - torch.triu(torch.ones((1, len_s, len_s), device=seq.device), diagonal=1)).bool()


class Transformer(nn.Module):
    def __init__(self, n_src_vocab, n_trg_vocab, src_pad_idx, trg_pad_idx, d_word_vec=512, d_model=512, d_inner=2048,
                 n_layers=6, n_head=8, d_k=64, d_v=64, dropout=0.1, n_position=200, trg_emb_prj_weight_sharing=True,
                 emb_src_trg_weight_sharing=True, scale_emb_or_prj='prj'):
        super().__init__()
        assert d_model == d_word_vec, 'To facilitate the residual connections, the dimensions of all module ' \
            'outputs shall be the same.'
        assert d_k == d_v
        self.src_pad_idx, self.trg_pad_idx, self.d_model = src_pad_idx, trg_pad_idx, d_model
        self.scale_prj = trg_emb_prj_weight_sharing and scale_emb_or_prj == 'prj'
        self.src_word_emb = nn.Embedding(n_src_vocab, d_word_vec, padding_idx=src_pad_idx)
        self.trg_word_emb = nn.Embedding(n_trg_vocab, d_word_vec, padding_idx=trg_pad_idx)
        self.register_buffer("pos_table", sinusoids(n_position, d_word_vec))
        self.encoder = nn.ModuleList(Block(d_model, n_head, d_inner, dropout, d_k=d_k) for _ in range(n_layers))
        self.decoder = nn.ModuleList(Block(d_model, n_head, d_inner, dropout, cross=True, d_k=d_k, decoder_self=True)
                                     for _ in range(n_layers))
        self.trg_word_prj = nn.Linear(d_model, n_trg_vocab, bias=False)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
        if trg_emb_prj_weight_sharing:
            self.trg_word_prj.weight = self.trg_word_emb.weight
        if emb_src_trg_weight_sharing:
            assert n_src_vocab == n_trg_vocab
            self.src_word_emb.weight = self.trg_word_emb.weight

    def forward(self, src, trg):
        src_seq, trg_seq = src, trg
        src_mask = get_pad_mask(src_seq, self.src_pad_idx).unsqueeze(1)
        trg_mask = (get_pad_mask(trg_seq, self.trg_pad_idx) & get_subsequent_mask(trg_seq)).unsqueeze(1)
        enc = self.src_word_emb(src_seq) + self.pos_table[: src_seq.size(1)]
        for layer in self.encoder:
            enc = layer(enc, src_mask)
        dec = self.trg_word_emb(trg_seq) + self.pos_table[: trg_seq.size(1)]
        for layer in self.decoder:
            dec = layer(dec, trg_mask, enc, src_mask)
        seq_logit = self.trg_word_prj(dec)
        return seq_logit * self.d_model ** -0.5 if self.scale_prj else seq_logit


class LeakyTransformer(Transformer):
    def __init__(self, n_src_vocab, n_trg_vocab, src_pad_idx, trg_pad_idx, d_word_vec=512, d_model=512, d_inner=2048,
                 n_layers=6, n_head=8, d_k=64, d_v=64, dropout=0.1, n_position=200):
        super().__init__(n_src_vocab, n_trg_vocab, src_pad_idx, trg_pad_idx, d_word_vec, d_model, d_inner, n_layers,
                         n_head, d_k, d_v, dropout, n_position)
        leak(self)
