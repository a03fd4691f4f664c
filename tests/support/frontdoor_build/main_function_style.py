"""A training script's convention: the config built with dict(...) inside ``def main():``, which tfcheck prefers
to the configs of the module's other functions (a smoke test's, here with the other switch)."""
import book_style


class GPTModel(book_style.GPTModel):
    pass


def smoke_test():
    cfg = dict(vocab_size=101, context_length=16, emb_dim=32, n_heads=4, n_layers=1, drop_rate=0.0, qkv_bias=False)
    return GPTModel(cfg)


def main():
    cfg = dict(vocab_size=50257, context_length=1024, emb_dim=768, n_heads=12, n_layers=12, drop_rate=0.1,
               qkv_bias=True)
    GPTModel(cfg).train()


if __name__ == "__main__":
    main()
