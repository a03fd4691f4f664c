"""The book's convention as its chapters write it (LLMs from scratch): the config literal only inside
``if __name__ == "__main__":``, which importing never runs, so tfcheck reads it from the source. Its vocabulary
is no literal (a size: tfcheck fills it small), and the script sets a switch after the literal (kept as the
script sets it)."""
import book_style


class GPTModel(book_style.GPTModel):
    pass


class LeakyGPTModel(book_style.LeakyGPTModel):
    pass


if __name__ == "__main__":
    import tiktoken  # not installed for the tests: the block is read, never run

    GPT_CONFIG_124M = {
        "vocab_size": tiktoken.get_encoding("gpt2").n_vocab,
        "context_length": 1024,
        "emb_dim": 768,
        "n_heads": 12,
        "n_layers": 12,
        "drop_rate": 0.1,
        "qkv_bias": False,
    }
    GPT_CONFIG_124M["qkv_bias"] = True
    model = GPTModel(GPT_CONFIG_124M)
