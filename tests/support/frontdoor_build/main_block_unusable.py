"""Configs in the ``__main__`` block that tfcheck cannot use: one lacks the qkv_bias the constructor reads, the
other takes it from the command line (no literal: a switch, which tfcheck never guesses). Building the model is
the usage error that names the field and the declaration that gives it."""
import argparse

import book_style


class GPTModel(book_style.GPTModel):
    pass


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--qkv-bias", action="store_true")
    args = parser.parse_args()
    WITHOUT_SWITCH = {"vocab_size": 50257, "context_length": 1024, "emb_dim": 768, "n_heads": 12, "n_layers": 12,
                      "drop_rate": 0.1}
    FROM_ARGS = {"vocab_size": 50257, "context_length": 1024, "emb_dim": 768, "n_heads": 12, "n_layers": 12,
                 "drop_rate": 0.1, "qkv_bias": args.qkv_bias}
    GPTModel(FROM_ARGS)
