"""The names models use for their hyper-parameters and forward arguments, written down once.

Every rule that reads a config, a constructor or a forward signature looks names up here, so a name added
for one family is known to all of them. Plain data: importing it imports no torch.
"""
from __future__ import annotations

# ----- hyper-parameters: one tuple per quantity, the most specific name first --------------------------
# The same names fill a constructor (tfcheck.model.build.spec), settle a fact (tfcheck.model.facts.inference) and
# explain an error (tfcheck.explainers): a name tfcheck fills as d_model is read back as d_model.
VOCAB_SIZE = ("vocab_size", "n_vocab", "ntoken", "num_tokens", "ntokens", "vocab")
SOURCE_VOCAB_SIZE = ("src_vocab_size",)
TARGET_VOCAB_SIZE = ("tgt_vocab_size",)
#: hidden_dim last: some models name their feed-forward width so.
D_MODEL = ("d_model", "hidden_size", "n_embd", "dim", "embed_dim", "model_dim", "ninp", "n_embed", "embed_size",
           "emb_size", "hidden_dim")
#: The token embedding's width: d_model where nothing projects it, so filled as d_model, but never read as it
#: (x-transformers' TransformerWrapper.emb_dim may differ from its attn_layers.dim).
EMBED_DIM = ("d_embed", "emb_dim", "d_word_vec")
NUM_HEADS = ("num_heads", "n_head", "n_heads", "nhead", "num_attention_heads", "heads")
#: Head counts of one side or of the keys and values only (grouped-query attention): never the head count.
OTHER_HEAD_COUNTS = ("encoder_attention_heads", "decoder_attention_heads", "num_key_value_heads")
#: The key / value head count of grouped-query attention, which must divide the head count.
KV_HEADS = ("num_key_value_heads", "n_kv_heads", "num_kv_heads", "kv_heads")
NUM_LAYERS = ("num_layers", "n_layer", "n_layers", "depth", "nlayers", "num_hidden_layers", "num_encoder_layers",
              "num_decoder_layers", "encoder_layers", "decoder_layers")
D_FF = ("d_ff", "dim_feedforward", "ffn_dim", "intermediate_size", "d_hidden", "nhid", "ff_dim", "mlp_dim", "d_inner",
        "n_inner", "encoder_ffn_dim", "decoder_ffn_dim", "feed_forward_size")
#: The longest sequence a model was built for. max_length last: Hugging Face configs before transformers 5
#: carry max_length=20 as a generation setting, which the resolver does not read there.
MAX_LEN = ("max_len", "max_position_embeddings", "n_positions", "block_size", "max_seq_len", "max_seq_length",
           "context_length", "n_ctx", "seq_len", "n_position", "num_positions", "max_length")
GENERATION_SETTINGS = ("max_length",)
DROPOUT = ("dropout", "p_drop", "dropout_rate", "attn_dropout", "resid_pdrop", "embd_pdrop", "attn_pdrop",
           "attention_dropout", "hidden_dropout_prob", "attention_probs_dropout_prob")
PAD_ID = ("pad_id", "pad_token_id", "pad_idx", "padding_idx")
HEAD_DIM = ("d_k", "d_v", "head_dim", "dim_head", "d_kv", "d_head", "attention_head_size")
#: Rotary embedding on part of each head (GPT-J, CodeGen).
ROTARY_DIM = ("rotary_dim",)
#: GPT-Neo's per-layer attention pattern.
ATTENTION_TYPES = ("attention_types",)
#: zero_expert_num last: experts that pass their input through (Longcat-Flash), which the router also picks from.
NUM_EXPERTS = ("num_experts", "num_local_experts", "n_routed_experts", "zero_expert_num")
EXPERT_D_FF = ("moe_intermediate_size", "shared_expert_intermediate_size", "expert_intermediate_size",
               "expert_ffn_hidden_size")
#: Experts every token passes through beside the routed ones: a count some configs leave unset (None) for the
#: checkpoint to state (Dots1 multiplies it into the shared experts' width), filled with 1 then, kept otherwise.
SHARED_EXPERTS = ("n_shared_experts", "num_shared_experts")
#: Experts each token is routed to: never more than the experts there are.
TOP_K = ("num_experts_per_tok", "top_k", "moe_top_k", "n_activated_experts", "moe_topk")
#: The span of a sliding-window attention (Longformer, LED): their inputs are padded to a multiple of it.
ATTENTION_WINDOW = ("attention_window",)
#: The bucket size of LSH attention (reformer-pytorch): its inputs must be a multiple of twice it.
BUCKET_SIZE = ("bucket_size",)
#: Axial position embeddings (Reformer): the widths of the factors sum to d_model, and the factors of the
#: position grid multiply to the longest length.
AXIAL_WIDTHS = ("axial_pos_embds_dim",)
AXIAL_SHAPE = ("axial_pos_shape",)
#: Blocks that pool the sequence by 2 between each other (Funnel Transformer's block_sizes: one entry per block),
#: and the switch that keeps the first (CLS) position out of the pooling: the shortest length they accept.
POOLING_BLOCKS = ("block_sizes",)
SEPARATE_CLS = ("separate_cls",)
#: The switch that drops the last position before each pooling of a sequence whose first is kept out (Funnel's
#: truncate_seq): the kept position then costs no extra pooled position.
TRUNCATE_SEQ = ("truncate_seq",)
#: Config fields giving the stride a model pools the sequence by once (a pooling window of that many positions).
DOWNSAMPLING_RATES = ("downsampling_rate",)
#: Per-layer patterns of hybrid models (a kind per layer, or a unit the config repeats over the layers): a default
#: derived from the layer count loses its rarer kinds when the count is shrunk (Qwen3-Next's one attention layer
#: in four), so the small config states every kind. layer_types is also the view that says which kinds there are.
#: (mlp_layer_types is no such pattern here: its sparse layers bring in routing groups the small experts do not
#: fill, BailingHybrid's n_group = 8 over 4 experts.)
LAYER_PATTERNS = ("layer_types", "block_types", "layers_block_type")
LAYER_KINDS_VIEW = "layer_types"
#: (period, offset) pairs that place a kind of layer at i % period == offset (Jamba's attention and experts).
LAYER_PERIODS = (("attn_layer_period", "attn_layer_offset"), ("expert_layer_period", "expert_layer_offset"))
#: Lists of the layer indices that hold a kind of layer.
LAYER_INDICES = ("attn_layer_indices", "full_attn_idxs")
#: Multimodal rotary embedding: the config's rope dicts split the rotary frequencies into temporal / height /
#: width sections (mrope_section, summing to the rotary width / 2, which partial_rotary_factor narrows). A config
#: that names mrope_section among its rope keys but leaves it unset gets the modeling code's fallback, Qwen2-VL's
#: 16 / 24 / 24 (GLM-4V's 8 / 12 / 12 keeps the proportions).
ROPE_DICTS = ("rope_parameters", "rope_scaling")
MROPE_SECTION = "mrope_section"
MROPE_FALLBACK = (16, 24, 24)
PARTIAL_ROTARY = "partial_rotary_factor"
BOS_TOKEN_ID = ("bos_token_id",)
EOS_TOKEN_ID = ("eos_token_id",)
#: Family invariants a small Hugging Face config keeps (tfcheck.model.build.small_invariants), as name patterns matched
#: whole. The widths of the parts of an attention head, stated apart (multi-head latent attention's
#: qk_nope_head_dim + qk_rope_head_dim, v_head_dim, beside the head_dim its rotary embedding reads).
HEAD_PARTS = r"((qk|q|k|v|kv)_)?((rope|nope)_)?head_dim"
#: The rotary part of a head where the config states it apart: mrope sections split it, not the whole head.
ROTARY_HEAD_PART = "qk_rope_head_dim"
#: Grouped expert routing: the experts split into n_group groups, each token routed within its topk_group best.
EXPERT_GROUPS = ("n_group", "num_expert_group")
ROUTED_GROUPS = ("topk_group",)
#: State-space (Mamba-2) heads: their count x their width = expand x d_model, the heads shared out in groups.
SSM_HEAD_COUNT = r"([a-z]+_)*(n|num)_([a-z]+_)*heads"
SSM_HEAD_DIM = r"([a-z]+_)*(d_head|head_?dim)"
SSM_EXPAND = r"([a-z]+_)*expand"
SSM_GROUPS = r"([a-z]+_)*n_?groups"
#: Counts of the layers of one section of the stack (input, recurrent, output layers summing to the layer count).
LAYER_SECTIONS = r"(n|num)_([a-z]+_)+layers"
#: A width derived from d_model by a factor field: ``<width>_factor`` next to the config's ``<width>``.
WIDTH_FACTOR_SUFFIX = "_factor"

#: fact -> the config / model attributes that hold it.
CONFIG_NAMES: dict[str, tuple[str, ...]] = {
    "vocab_size": VOCAB_SIZE + SOURCE_VOCAB_SIZE,
    "target_vocab_size": TARGET_VOCAB_SIZE,
    "output_vocab_size": TARGET_VOCAB_SIZE + VOCAB_SIZE,
    "pad_id": PAD_ID,
    "max_len": MAX_LEN,
    "d_model": D_MODEL,
    # a vocabulary padded up to a multiple of 64 or 128 for speed (litgpt, Megatron): the logits' width by design
    "padded_vocab_size": ("padded_vocab_size", "padded_vocab"),
}
#: Parameter names under which a constructor takes a whole config object.
CONFIG_PARAMS = ("config", "cfg", "conf", "args", "hparams", "params", "model_args", "model_config", "model_cfg",
                 "configs", "hps", "hp", "opt", "opts")
#: Config fields that name a preset of sizes instead of the sizes (minGPT's model_type = 'gpt2' next to n_layer =
#: None, asserting exactly one is given): tfcheck states the sizes, so it clears the preset.
SIZE_PRESETS = ("model_type",)

#: Name patterns for the names the exact tables above do not list, one table (regular expression, the table
#: whose quantity it is); tfcheck.model.build.small_sizes.quantity reads the exact names first. ``hidden`` counts as
#: the feed-forward width only with a qualifier (ffn_hidden): hidden_size / hidden_dim stay d_model.
#: A switch is never a size: use_dropout, no_dropout, apply_dropout, is_drop, with_ffn take True / False.
_NOT_A_SWITCH = r"(?!(use|no|apply|is|enable|disable|with|has|do|add)_)"
#: The FFN's names: a bare ffn / mlp / inner is a module or a switch, a width only with a size word beside it.
_FFN = r"(ffn|ff|inner|mlp|feedforward|feed_forward)"
NAME_PATTERNS: tuple[tuple[str, str], ...] = (
    # unpadded_: a vocabulary padded for speed keeps its true size beside it, the LM head's width (Inkling 2)
    (r"(n_|num_)?((src|tgt|trg|enc|dec|source|target|input|output|unpadded|padded)_?)?(vocab|voc|ntoken)s?"
     r"(_size|_len)?", "VOCAB_SIZE"),
    (rf"(d_|n_|dim_){_FFN}(_hidden|_hid)?(_dim|_size|_width)?|{_FFN}((_hidden|_hid)(_dim|_size|_width)?|"
     r"_dim|_size|_width)", "D_FF"),
    (rf"{_NOT_A_SWITCH}([a-z]+_)*(drop|dropout|pdrop|p_drop)(_(rate|prob|p|ratio))?", "DROPOUT"),
    (rf"{_NOT_A_SWITCH}([a-z]+_)*pad(ding)?(_token)?_(idx|id|index)", "PAD_ID"),
    (rf"{_NOT_A_SWITCH}([a-z]+_)*(sos|bos)(_token)?_(idx|id|index)", "BOS_TOKEN_ID"),
    (rf"{_NOT_A_SWITCH}([a-z]+_)*eos(_token)?_(idx|id|index)", "EOS_TOKEN_ID"),
    # grouped-query attention's key / value head count, however spelled: n_kv_head (modded-nanogpt), n_head_kv
    # (Falcon), n_query_groups (litgpt); shrunk with the head count so that it keeps dividing it
    (r"(n|num)_(kv|key_value)_heads?|(n|num)_heads?_kv|(n|num)_query_groups", "KV_HEADS"),
)
#: The paper's single letters: the Annotated Transformer's make_model(src_vocab, tgt_vocab, N=6, d_model=512,
#: d_ff=2048, h=8) and MultiHeadedAttention(h, d_model), and a width d beside a head count. Read so only beside
#: another recognised size (tfcheck.model.build.name_rules.letter_quantity): a lone N, h or d says nothing.
PAPER_PAIR = {"N": "NUM_LAYERS", "h": "NUM_HEADS", "d": "D_MODEL"}

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

#: Hugging Face causal-LM heads by class-name ending (ReformerModelWithLMHead too), and the config switch their
#: families build a decoder with: such a head asserts it, or warns and runs bidirectionally without it.
HF_CAUSAL_HEADS = ("ForCausalLM", "LMHeadModel", "WithLMHead")
HF_DECODER_SWITCH = "is_decoder"

# ----- forward arguments ------------------------------------------------------------------------------
#: Forward arguments that take the target sequence of a seq2seq model (the decoder input), by exact name: the
#: decoder input on any model (torch.nn.Transformer's forward(src, tgt) takes features and has no embedding).
TARGET_ARGS = ("tgt", "trg", "decoder_input_ids", "tgt_tokens", "target_ids", "dec_input")
#: Loss targets: forward(idx, targets=None) takes the labels of its own loss (nanoGPT), never a decoder input.
LOSS_TARGET_ARGS = ("y", "targets", "labels", "label", "lm_labels")
#: The one table of forward-argument name patterns (regular expression matched whole, the role it says), read
#: first match first by tfcheck.model.facts.targets: the target side's masks, flags, lengths and positions come before
#: the decoder input, so tgt_mask, tgt_key_padding_mask and tgt_is_causal are never the decoder input. A
#: "decoder input" name is read so only on a model that is encoder-decoder by structure (two token embeddings).
FORWARD_ARG_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"[a-z_]*(mask|is_causal|_lens?|_lengths?|_pos|_positions?)", "not a sequence"),
    (r"(tgt|trg)(_?[a-z]+)*", "decoder input"),
    (r"dec(oder)?_?in(p|put|puts)?(_?[a-z]+)*", "decoder input"),
)
#: A required forward argument that says where the sequence starts in a cache (llama's forward(tokens,
#: start_pos)): an int, 0 for a probe that starts at the beginning.
START_POSITION_ARGS = ("start_pos", "start_position", "start_index", "pos_offset", "position_offset", "offset",
                       "past_length", "past_len", "seqlen_offset", "cache_offset")
#: Forward arguments that take a padding mask (convention unknown unless the name says it).
MASK_ARGS = ("mask", "attention_mask", "src_mask", "key_padding_mask", "src_key_padding_mask", "pad_mask",
             "padding_mask")
#: Names that say the padding mask itself in torch's (length, batch) modules, where ``mask`` / ``src_mask`` is
#: the (length, length) attention mask and the padding goes in a key_padding_mask.
KEY_PADDING_ARGS = ("attention_mask", "key_padding_mask", "src_key_padding_mask", "pad_mask", "padding_mask")
#: Forward arguments whose name says the caller builds the decoder's look-ahead mask (the tutorial style:
#: forward(src, tgt, src_mask, tgt_mask)): given it, optional or required, unless the model builds its own.
#: A generic name (mask, attn_mask) never is: a decoder that forgot its own mask must still fail.
CAUSAL_MASK_ARGS = ("tgt_mask", "trg_mask", "causal_mask", "look_ahead_mask", "subsequent_mask")
#: The parameter of a ``decode`` method that takes ``encode``'s output (a model with no forward of its own,
#: tfcheck.model.build.composed), matched whole: memory, encoder_output(s), enc_out, enc_src, encoded, context ...
ENCODER_OUTPUT_ARG = (r"memory|mem|encoded|context|"
                      r"enc(oder)?_?(out|outs|output|outputs|src|states?|hidden(_states)?|memory)?")
#: The methods that map decode's states to logits, when the class defines one (hkproj's ``project``).
PROJECT_METHODS = ("project", "generator")
#: A method that must run before forward (gpt-fast's ``setup_caches(max_batch_size, max_seq_length)``), by name:
#: set up / init / allocate / reset / build ... + cache(s), matched whole; tfcheck.model.trial.set_up.
SETUP_METHOD = r"_?(setup|set_up|init|initialize|initialise|allocate|alloc|reset|build|create|make)_(kv_)?caches?"
#: Its batch-size and length parameters, matched whole.
SETUP_BATCH_ARG = r"(max_)?(batch_size|batch|bsz|bs|batch_sz|num_batch)"
SETUP_LENGTH_ARG = (r"(max_)?(seq_len|seq_length|seqlen|sequence_length|length|len|cache_len|cache_size|ctx_len|"
                    r"context_length)")
#: A forward argument of token positions (gpt-fast's ``input_pos``) given ``arange(length)`` once the set-up ran:
#: the probe starts at position 0, as a start_pos of 0 says.
POSITIONS_ARGS = ("input_pos", "input_positions", "positions", "pos")
