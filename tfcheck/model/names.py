"""The names models use for their hyper-parameters and forward arguments, written down once.

Every rule that reads a config, a constructor or a forward signature looks names up here, so a name added
for one family is known to all of them. Plain data: importing it imports no torch.
"""
from __future__ import annotations

#: fact -> the config / model attributes that hold it, most specific first.
CONFIG_NAMES: dict[str, tuple[str, ...]] = {
    "vocab_size": ("vocab_size", "n_vocab", "ntoken", "num_tokens", "src_vocab_size"),
    "output_vocab_size": ("tgt_vocab_size", "vocab_size", "n_vocab", "ntoken", "num_tokens"),
    "pad_id": ("pad_id", "pad_token_id", "pad_idx", "padding_idx"),
    "max_len": ("max_len", "max_position_embeddings", "n_positions", "block_size", "max_seq_len",
                "max_seq_length", "context_length", "n_ctx"),
    "d_model": ("d_model", "hidden_size", "n_embd", "dim", "embed_dim", "model_dim"),
}

#: Hugging Face model families whose causality their config's model_type states: bidirectional encoders
#: and decoder-only LMs. (``is_decoder`` and ``is_encoder_decoder`` are read first: a BERT built as a decoder
#: says so there.)
HF_FAMILIES: dict[str, str] = {
    **dict.fromkeys(("bert", "roberta", "distilbert", "albert", "electra", "deberta", "deberta-v2", "xlm-roberta",
                     "camembert", "mpnet", "modernbert", "ernie", "esm", "longformer", "megatron-bert",
                     # XLNet attends both ways unless given a perm_mask (its *LMHeadModel is no causal LM)
                     "xlnet"), "encoder"),
    **dict.fromkeys(("gpt2", "openai-gpt", "gpt_neo", "gpt_neox", "gptj", "gpt_bigcode", "llama", "mistral", "mixtral",
                     "opt", "bloom", "falcon", "qwen2", "qwen3", "phi", "phi3", "gemma", "gemma2", "gemma3_text",
                     "codegen", "starcoder2", "olmo", "olmo2", "stablelm", "mpt"), "decoder"),
}
#: Hugging Face class-name endings that say the kind (a head decides it: a masked LM reads both ways).
HF_CLASS_KINDS: tuple[tuple[str, str], ...] = (
    ("ForCausalLM", "decoder"), ("LMHeadModel", "decoder"), ("ForMaskedLM", "encoder"), ("EncoderModel", "encoder"))

# ----- forward arguments ------------------------------------------------------------------------------
#: Forward arguments that take the target sequence of a seq2seq model (the decoder input).
TARGET_ARGS = ("tgt", "trg", "decoder_input_ids", "tgt_tokens", "target_ids", "dec_input")
#: Forward arguments that take a padding mask (convention unknown unless the name says it).
MASK_ARGS = ("mask", "attention_mask", "src_mask", "key_padding_mask", "src_key_padding_mask", "pad_mask",
             "padding_mask")
#: Required forward arguments that take the decoder's causal (look-ahead) mask, built by the caller in the
#: tutorial style: forward(src, tgt, src_mask, tgt_mask).
CAUSAL_MASK_ARGS = ("tgt_mask", "trg_mask", "causal_mask", "look_ahead_mask", "subsequent_mask")
