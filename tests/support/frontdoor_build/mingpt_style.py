"""minGPT's convention: GPT.get_default_config() returns a CfgNode with model_type = 'gpt' and every size None;
the constructor asserts a model type or the sizes (not both), then merges the type's sizes into its config."""
import torch
import torch.nn as nn
from frontdoor_blocks import Block, leak
from frontdoor_cfgnode import CfgNode as CN


class GPT(nn.Module):
    @staticmethod
    def get_default_config():
        C = CN()
        C.model_type = 'gpt'
        C.n_layer = None
        C.n_head = None
        C.n_embd = None
        C.vocab_size = None
        C.block_size = None
        C.embd_pdrop = 0.1
        C.resid_pdrop = 0.1
        C.attn_pdrop = 0.1
        return C

    def __init__(self, config):
        super().__init__()
        assert config.vocab_size is not None
        assert config.block_size is not None
        self.block_size = config.block_size
        type_given = config.model_type is not None
        params_given = all([config.n_layer is not None, config.n_head is not None, config.n_embd is not None])
        assert type_given ^ params_given  # exactly one of these
        if type_given:  # translate from model_type to detailed configuration (the constructor mutates it)
            config.merge_from_dict({
                'gpt2': dict(n_layer=12, n_head=12, n_embd=768),
                'gpt-mini': dict(n_layer=6, n_head=6, n_embd=192),
                'gpt-nano': dict(n_layer=3, n_head=3, n_embd=48),
            }[config.model_type])
        self.tok_emb = nn.Embedding(config.vocab_size, config.n_embd)
        self.pos_emb = nn.Embedding(config.block_size, config.n_embd)
        self.drop = nn.Dropout(config.embd_pdrop)
        self.blocks = nn.ModuleList(Block(config.n_embd, config.n_head, 4 * config.n_embd, config.resid_pdrop,
                                          causal=True) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)

    def forward(self, idx, targets=None):
        x = self.drop(self.tok_emb(idx) + self.pos_emb(torch.arange(idx.size(1), device=idx.device)))
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None
        if targets is not None:
            loss = nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss

    @torch.no_grad()
    def generate(self, idx, max_new_tokens):
        for _ in range(max_new_tokens):
            logits, _ = self(idx[:, -self.block_size:])
            idx = torch.cat((idx, logits[:, -1].argmax(-1, keepdim=True)), dim=1)
        return idx


class LeakyGPT(GPT):
    def __init__(self, config):
        super().__init__(config)
        leak(self)
