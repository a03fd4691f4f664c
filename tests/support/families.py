"""The model families tfcheck is proven on (Hugging Face built from small configs, torch.nn as documented,
x-transformers, nanoGPT, the tutorial style, bare attention modules): how to build each, what tfcheck must infer
about it and why a correct model of it warns or skips where it does. tests/integration/test_model_families.py
runs the battery on each; the snapshot harness (snapshot.py) stores each one's report."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch.nn as nn

import tfcheck
import zoo_families as zf
from tfcheck.model.build.spec import load


@dataclass
class Family:
    make: Callable[[], nn.Module] | str  # a factory, or a spec string tfcheck builds itself
    #: what tfcheck must infer without a declaration: key -> (value, a piece of the source it reports)
    infers: dict[str, tuple[Any, str]]
    #: check -> why a correct model of this family warns or skips there (and must)
    explained: dict[str, str] = field(default_factory=dict)
    declared: dict[str, Any] = field(default_factory=dict)
    needs: str | None = None  # the package it needs

    def instance(self) -> nn.Module:
        return load(self.make).model if isinstance(self.make, str) else self.make()


UNKNOWN_KIND = ("nothing in the forward says whether the model is causal: the kind is unknown, the leak is "
                "reported as a warning that names the declaration (kind=encoder or causal=false)")
TUTORIAL_FILL = ("the tutorial's masked_fill(mask == 0, -1e9) overflows float16 (becomes -inf, NaN in a fully "
                 "masked row): a warning until precision=fp32 or fp16 is declared")
X_CACHE = ("x-transformers returns its cache only with return_intermediates=True, which tfcheck's cache protocol "
           "(past_key_values, or the last element of a returned tuple) does not pass: inconclusive, said as such")
NO_HEAD = "a model without an LM head returns hidden states, so the loss at init has no logits to judge"
HF_ENCODER = {"mask": ("attention_mask:keep", "Hugging Face convention")}
FALCON_DROPOUT = ("Falcon's attention (non-alibi path) calls scaled_dot_product_attention with dropout_p=0.0 "
                  "whatever attention_dropout says (tfcheck's small config sets 0.1; Falcon's default is 0.0): the "
                  "warning is true of the code and explains itself")
PEGASUS_FAINT = ("freshly initialised Pegasus lets the source reach the logits at about 1e-4, too faint to call it "
                 "blind to order: inconclusive, said as such (its sinusoidal positions are there)")
LONGFORMER_OPAQUE = ("Longformer's sliding-window attention multiplies diagonal chunks of q and k "
                     "(_sliding_chunks_query_key_matmul), no q·kᵀ product of (length, length) scores tfcheck "
                     "recognises: inconclusive, said as such")
GLOBAL_UNUSED = ("the global-attention projections (query_global, key_global, value_global) run only for tokens a "
                 "global_attention_mask marks, an optional input tfcheck leaves at None: the warning names the "
                 "parameters and that input")
FUNNEL_POOLING = ("Funnel mean-pools the sequence between its blocks (config.block_sizes) without the padding "
                  "mask, so a pooled position averages a pad into its real neighbour: true of the code, said with "
                  "the config fields that state the pooling")
FUNNEL_SCALE = ("Funnel adds r_w_bias to the scaled queries and sums content, position and token-type scores "
                "(relative attention): attention.scale reads the sum as another scale (tfcheck/probe/attention_sites"
                ".py and checks/numerics/attention_scale.py are another helper's, HA)")

FAMILIES: dict[str, Family] = {
    # ----- Hugging Face, built by tfcheck from small configs --------------------------------------------
    "hf-gpt2-lm": Family("transformers:GPT2LMHeadModel", {"kind": ("decoder", "config.model_type = 'gpt2'"),
                                                           "output": ("logits", "'logits'")}, needs="transformers"),
    "hf-gpt2-model": Family("transformers:GPT2Model", {"kind": ("decoder", "model_type = 'gpt2'"),
                                                       "output": ("last_hidden_state", "'last_hidden_state'")},
                            explained={"train.loss_at_init": NO_HEAD}, needs="transformers"),
    "hf-bert": Family("transformers:BertModel", {"kind": ("encoder", "config.model_type = 'bert'"), **HF_ENCODER},
                      needs="transformers"),
    "hf-bert-mlm": Family("transformers:BertForMaskedLM", {"kind": ("encoder", "model_type = 'bert'"),
                                                           "output": ("logits", "'logits'")}, needs="transformers"),
    "hf-distilbert": Family("transformers:DistilBertModel",
                            {"kind": ("encoder", "model_type = 'distilbert'"), "d_model": (32, "config.hidden_size"),
                             **HF_ENCODER}, needs="transformers"),
    "hf-roberta": Family("transformers:RobertaModel",
                         {"kind": ("encoder", "model_type = 'roberta'"),
                          "max_len": (63, "padding_idx=0, so positions count from 1")}, needs="transformers"),
    "hf-llama": Family("transformers:LlamaForCausalLM", {"kind": ("decoder", "model_type = 'llama'")},
                       needs="transformers"),
    "hf-qwen2-moe": Family("transformers:Qwen2MoeModel",  # a family tfcheck does not list
                           {"kind": ("decoder", "defines the causal-LM head Qwen2MoeForCausalLM")},
                           explained={"train.loss_at_init": NO_HEAD}, needs="transformers"),
    "hf-t5": Family("transformers:T5ForConditionalGeneration",
                    {"kind": ("seq2seq", "config.is_encoder_decoder = True")},
                    explained={"attention.scale": "T5 runs unscaled attention and folds 1/sqrt(d_k) into its "
                                                  "initialisation; the warning names the family and says so"},
                    needs="transformers"),
    # ----- torch.nn, as its documentation uses it ----------------------------------------------------------
    "torch-transformer": Family(zf.nn_transformer, {
        "kind": ("seq2seq", "target argument (tgt)"), "mask": ("src_key_padding_mask:pad", "torch convention"),
        "tgt_mask": ("nn.Transformer.generate_square_subsequent_mask(t)", "as torch documents"),
        "inputs": ("float features (batch, length, d_model)", "no nn.Embedding")}),
    "torch-transformer-seq-first": Family(zf.nn_transformer_seq_first, {
        "layout": ("(length, batch, d_model)", "torch.nn.Transformer.batch_first = False")}),
    "torch-encoder": Family(zf.nn_encoder, {"kind": ("encoder", "torch.nn.TransformerEncoder: it attends both ways"),
                                            "d_model": (32, "'layers.0.self_attn'.embed_dim")}),
    "torch-token-encoder": Family(zf.TorchTokenEncoder, {"kind": (None, "unknown")},
                                  explained={"mask.causal": UNKNOWN_KIND}),
    "torch-token-encoder-declared": Family(zf.TorchTokenEncoder, {"kind": ("encoder", "run_checks() argument")},
                                           declared={"kind": "encoder"}),
    "torch-token-encoder-additive": Family(zf.TorchTokenEncoder, {
        "mask": ("src_key_padding_mask:additive", "run_checks() argument")},  # torch adds a float padding mask
        declared={"kind": "encoder", "mask": "src_key_padding_mask:additive"}),
    "torch-causal-lm": Family(zf.TorchCausalLM, {"kind": ("decoder", "__tfcheck__ on TorchCausalLM"),
                                                 "mask": ("src_key_padding_mask:pad", "torch convention")}),
    "torch-mha": Family(zf.nn_multihead_attention, {"kind": ("attention", "(query, key, value)"),
                                                    "output": (0, "first tensor of the returned tuple")}),
    "torch-mha-seq-first": Family(zf.nn_multihead_attention_seq_first, {
        "layout": ("(length, batch, d_model)", "torch.nn.MultiheadAttention.batch_first = False")}),
    # ----- x-transformers --------------------------------------------------------------------------------
    "x-decoder": Family(zf.x_decoder, {
        "kind": ("decoder", "model.attn_layers.causal = True"), "causal": (True, "model.attn_layers.causal"),
        "vocab_size": (zf.VOCAB, "model.num_tokens"), "max_len": (zf.MAX_LEN, "model.max_seq_len"),
        "d_model": (zf.D, "model.attn_layers.dim"), "mask": ("mask:keep", "x-transformers"),
        "returns": ("logits", "model.to_logits")}, explained={"decode.cache": X_CACHE}, needs="x_transformers"),
    "x-decoder-rotary": Family(zf.x_decoder_rotary, {"kind": ("decoder", "model.attn_layers.causal = True")},
                               explained={"decode.cache": X_CACHE}, needs="x_transformers"),
    "x-encoder": Family(zf.x_encoder, {"kind": ("encoder", "model.attn_layers.causal = False"),
                                       "mask": ("mask:keep", "x-transformers")}, needs="x_transformers"),
    # ----- nanoGPT, the tutorial style, attention modules ------------------------------------------------
    "nanogpt": Family("zoo_families:GPT", {
        "kind": ("decoder", "GPT has a generate() method"), "targets": ("the input tokens", "nanoGPT convention"),
        "max_len": (64, "config.block_size"),
        "constructor arguments": ({"config": "GPTConfig(small sizes)"}, "filled")}),
    "nanogpt-on-torch-layers": Family("zoo_training:NanoGPTStyle", {
        "kind": ("decoder", "__tfcheck__"), "targets": ("the input tokens", "nanoGPT convention")}),
    "tutorial-encoder": Family(zf.TutorialEncoder, {
        "mask": ("src_mask:keep", "convention unknown, assumed keep"),
        "mask layout": ("b11s (batch, 1, 1, length)", "ran with these; declare mask=src_mask:keep:b11s")},
        explained={"mask.causal": UNKNOWN_KIND, "numerics.half": TUTORIAL_FILL}),
    "annotated-seq2seq": Family(zf.AnnotatedEncoderDecoder, {
        "kind": ("seq2seq", "target argument (tgt)"),
        "tgt_mask": ("the causal keep mask (True on and below the diagonal)", "forward requires tgt_mask"),
        "mask layout": ("b1s (batch, 1, length)", "declare mask=src_mask:keep:b1s")},
        explained={"numerics.half": TUTORIAL_FILL}),
    # ----- designs that once looked like bugs (each a false alarm found by running them) ---------------
    "hf-bloom": Family("transformers:BloomForCausalLM",  # eager scores + alibi via baddbmm(batch1=, batch2=)
                       {"kind": ("decoder", "model_type = 'bloom'")}, needs="transformers"),
    "hf-falcon": Family("transformers:FalconForCausalLM",  # parallel block: mlp_output += attention_output
                        {"kind": ("decoder", "model_type = 'falcon'")},
                        explained={"dropout.eval": FALCON_DROPOUT}, needs="transformers"),
    "hf-gptj": Family("transformers:GPTJForCausalLM", {"kind": ("decoder", "model_type = 'gptj'")},
                      needs="transformers"),  # rotary_dim filled small, within the small head size
    "hf-codegen": Family("transformers:CodeGenForCausalLM", {"kind": ("decoder", "model_type = 'codegen'")},
                         needs="transformers"),
    "hf-gpt-neo": Family("transformers:GPTNeoForCausalLM", {"kind": ("decoder", "model_type = 'gpt_neo'")},
                         explained={"attention.scale": "GPT-Neo runs unscaled attention as released (Mesh "
                                                       "TensorFlow): an explained warning"}, needs="transformers"),
    "hf-albert": Family("transformers:AlbertModel",  # LayerNorm(x + attention) inside the attention module
                        {"kind": ("encoder", "model_type = 'albert'")}, needs="transformers"),
    "hf-pegasus": Family("transformers:PegasusForConditionalGeneration",
                         {"kind": ("seq2seq", "config.is_encoder_decoder = True")},
                         explained={"position.sensitivity": PEGASUS_FAINT}, needs="transformers"),
    "hf-longformer": Family("transformers:LongformerModel",  # pads ids to its window; positions from ids != pad
                            {"kind": ("encoder", "model_type = 'longformer'")},
                            explained={"attention.heads": LONGFORMER_OPAQUE, "attention.scale": LONGFORMER_OPAQUE,
                                       "attention.softmax_axis": LONGFORMER_OPAQUE, "train.grad_flow": GLOBAL_UNUSED},
                            needs="transformers"),
    "hf-led": Family("transformers:LEDForConditionalGeneration",  # Longformer encoder, BART decoder
                     {"kind": ("seq2seq", "config.is_encoder_decoder = True")},
                     explained={"position.sensitivity": LONGFORMER_OPAQUE, "train.grad_flow": GLOBAL_UNUSED},
                     needs="transformers"),
    "hf-funnel": Family("transformers:FunnelModel", {"min_len": (5, "config.block_sizes = [1, 1, 1]: 2 poolings")},
                        explained={"mask.padding": FUNNEL_POOLING, "attention.scale": FUNNEL_SCALE},
                        declared={"kwargs": {"config": {"block_sizes": [1, 1, 1], "block_repeats": [1, 1, 1]}}},
                        needs="transformers"),
    "hf-llama-eager": Family(lambda: zf.hf_eager("LlamaForCausalLM", hidden_size=zf.D, num_attention_heads=zf.HEADS,
                                                  num_hidden_layers=zf.LAYERS, intermediate_size=zf.FF),
                             {"kind": ("decoder", "model_type = 'llama'")}, needs="transformers"),
    "hf-gpt2-eager": Family(lambda: zf.hf_eager("GPT2LMHeadModel", n_embd=zf.D, n_head=zf.HEADS, n_layer=zf.LAYERS),
                            {"kind": ("decoder", "model_type = 'gpt2'")}, needs="transformers"),
    "nanogpt-parallel": Family("zoo_families:ParallelGPT", {"kind": ("decoder", "generate()")}),
    "tutorial-attention": Family(zf.tutorial_attention_module, {
        "kind": ("attention", "(query, key, value)"), "d_model": (zf.D, "nn.Linear 'linears.0'.in_features")}),
}


def report_of(family: Family, model: Any = None, **only):
    return tfcheck.run_checks(model if model is not None else family.make, **only, **family.declared)
