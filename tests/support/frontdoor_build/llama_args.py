"""A Llama-style ModelArgs kept in its own module and imported into the model's (llama_style.py)."""
from dataclasses import dataclass


@dataclass
class ModelArgs:
    dim: int = 4096
    n_layers: int = 32
    n_heads: int = 32
    n_kv_heads: int | None = 8
    vocab_size: int = -1  # set from the tokenizer
    multiple_of: int = 256
    norm_eps: float = 1e-5
    max_seq_len: int = 2048
