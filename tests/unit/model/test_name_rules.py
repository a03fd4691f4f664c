"""The word rule for constructor argument names (issue 29): long-hand, per-side, camelCase and single-letter
spellings read as their quantity, ambiguous ones left unfilled, and an options namespace read by attribute."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import tfcheck
from tfcheck.errors import SpecError
from tfcheck.model.build.configs import options_namespace
from tfcheck.model.build.construction import build
from tfcheck.model.build.name_rules import namespace_reads, snake, words
from tfcheck.model.build.small_sizes import quantity


def test_a_name_splits_into_words_in_snake_and_camel_case():
    assert words("numberOfHeads") == ["number", "of", "heads"] and words("max_seqLen") == ["max", "seq", "len"]
    assert words("dModel") == ["d", "model"] and words("maxlen") == ["max", "len"]
    assert snake("vocabSize") == "vocab_size" and snake("d_model") == "d_model"


@pytest.mark.parametrize(("name", "expected"), [
    # long-hand dimension / number-of names (model_dimension: hkproj-style tutorials; dim_model: the
    # towardsdatascience nn.Transformer guide; embedding_dim: VQGAN-GPT snippets)
    ("model_dimension", "D_MODEL"), ("dim_model", "D_MODEL"), ("embedding_dim", "D_MODEL"),
    ("embedding_dimension", "D_MODEL"), ("model_size", "D_MODEL"), ("embd_dim", "D_MODEL"),
    ("encoder_embed_dim", "D_MODEL"), ("numberOfEmbeddingDimensions", "D_MODEL"), ("d_emb", "D_MODEL"),
    ("number_of_heads", "NUM_HEADS"), ("num_attention_heads", "NUM_HEADS"), ("n_attention_heads", "NUM_HEADS"),
    ("num_head", "NUM_HEADS"), ("numberOfHeads", "NUM_HEADS"), ("decoder_num_heads", "NUM_HEADS"),
    ("number_of_layers", "NUM_LAYERS"), ("num_layer", "NUM_LAYERS"), ("n_blocks", "NUM_LAYERS"),
    ("num_blocks", "NUM_LAYERS"), ("num_transformer_blocks", "NUM_LAYERS"), ("n_enc_blocks", "NUM_LAYERS"),
    ("n_hidden_layers", "NUM_LAYERS"), ("numberOfLayers", "NUM_LAYERS"),
    ("feed_forward_dim", "D_FF"), ("feed_forward_dimension", "D_FF"), ("ff_hidden_size", "D_FF"),
    ("intermediate_dim", "D_FF"), ("mlp_hidden_dim", "D_FF"), ("inner_dim", "D_FF"),
    # a sequence length, one per side
    ("max_sequence_length", "MAX_LEN"), ("src_seq_len", "MAX_LEN"), ("tgt_seq_len", "MAX_LEN"),
    ("trg_seq_length", "MAX_LEN"), ("context_len", "MAX_LEN"), ("max_context_length", "MAX_LEN"),
    ("context_size", "MAX_LEN"), ("len_max_seq", "MAX_LEN"), ("maxlen", "MAX_LEN"), ("max_tokens", "MAX_LEN"),
    # a vocabulary per side
    ("source_vocab_size", "VOCAB_SIZE"), ("target_vocab_size", "VOCAB_SIZE"), ("input_vocab_size", "VOCAB_SIZE"),
    ("output_vocab_size", "VOCAB_SIZE"), ("target_vocabulary_size", "VOCAB_SIZE"), ("vocabularySize", "VOCAB_SIZE"),
    ("vocab_src_len", "VOCAB_SIZE"), ("d_src_vocab", "VOCAB_SIZE"), ("d_vocab", "VOCAB_SIZE"),
    ("head_size", "HEAD_DIM"), ("dim_per_head", "HEAD_DIM"),
])
def test_a_spelling_maps_to_its_quantity(name, expected):
    assert quantity(name) == expected


@pytest.mark.parametrize("name", [
    # bare words and lists of modules
    "layers", "blocks", "hidden", "embedding", "model", "heads_list", "len", "context", "size", "width",
    # a width or length of what? (an input's features, a source batch's length, a layer's width)
    "input_dim", "src_len", "src_seq", "layer_size", "block_len", "n_hidden", "num_embeddings",
    # factors and ratios are no widths
    "mlp_ratio", "forward_expansion", "expansion_factor", "ffn_dim_multiplier",
    # switches and other words
    "use_mlp", "tie_embeddings", "max_batch_size", "type_vocab_size", "position_embedding_type",
])
def test_an_ambiguous_or_unknown_name_stays_unfilled(name):
    assert quantity(name) is None


def test_a_hidden_width_is_d_ff_beside_another_width_and_d_model_alone():
    # the PyTorch tutorial's TransformerModel(ntoken, d_model, nhead, d_hid, nlayers)
    assert quantity("d_hid", ["ntoken", "d_model", "nhead", "d_hid", "nlayers"]) == "D_FF"
    assert quantity("hidden_dimension", ["model_dimension", "hidden_dimension"]) == "D_FF"
    assert quantity("hidden_dimension") == "D_MODEL"


def test_single_letters_are_read_only_beside_another_size():
    # the Annotated Transformer's make_model and hkproj's build_transformer
    signature = ["src_vocab_size", "tgt_vocab_size", "src_seq_len", "tgt_seq_len", "d_model", "N", "h", "dropout",
                 "d_ff"]
    assert (quantity("N", signature), quantity("h", signature)) == ("NUM_LAYERS", "NUM_HEADS")
    assert quantity("h", ["h", "d_model", "dropout"]) == "NUM_HEADS"  # MultiHeadedAttention(h, d_model)
    assert quantity("N", ["vocab_size", "d_model", "N", "heads"]) == "NUM_LAYERS"
    assert quantity("d", ["vocab_size", "d", "n_heads"]) == "D_MODEL"
    for letter in ("N", "h", "d"):
        assert quantity(letter) is None and quantity(letter, [letter, "dropout", "vocab_size"]) is None
    assert quantity("d", ["d", "d_model", "n_heads"]) is None  # a second width: d is something else


def test_the_word_rule_is_off_for_hugging_face_fields():
    assert quantity("embedding_size") == "D_MODEL" and quantity("embedding_size", words=False) is None


class LongHand(nn.Module):
    """A seq2seq-style encoder signature spelled out long-hand, every argument required."""

    def __init__(self, source_vocabulary_size, model_dimension, number_of_heads, number_of_layers,
                 feed_forward_dimension, max_sequence_length, dropout_p=0.1):
        super().__init__()
        self.token_embedding = nn.Embedding(source_vocabulary_size, model_dimension)
        self.position_embedding = nn.Embedding(max_sequence_length, model_dimension)
        layer = nn.TransformerEncoderLayer(model_dimension, number_of_heads, feed_forward_dimension, dropout_p,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, number_of_layers, enable_nested_tensor=False)
        self.head = nn.Linear(model_dimension, source_vocabulary_size)

    def forward(self, tokens):
        positions = torch.arange(tokens.size(1), device=tokens.device)
        return self.head(self.encoder(self.token_embedding(tokens) + self.position_embedding(positions)))


def test_a_model_with_long_hand_names_is_built_small_and_the_battery_runs():
    report = tfcheck.run_checks(LongHand).models[0]
    filled = next(a.value for a in report.assumptions if a.key == "constructor arguments")
    assert filled == {"source_vocabulary_size": 101, "model_dimension": 32, "number_of_heads": 4,
                      "number_of_layers": 2, "feed_forward_dimension": 64, "max_sequence_length": 64}
    assert report.result("forward.smoke").status is tfcheck.Status.PASS
    assert not [r.check for r in report.results if r.status is tfcheck.Status.FAIL]


class Namespaced(nn.Module):
    """Reads its sizes from an options namespace under a name no table lists."""

    def __init__(self, settings):
        super().__init__()
        self.settings = settings
        self.embed = nn.Embedding(settings.vocabulary_size, settings.embedding_dim)
        self.attention = nn.MultiheadAttention(settings.embedding_dim, settings.number_of_heads, batch_first=True)
        self.out = nn.Linear(settings.embedding_dim, settings.vocabulary_size)

    def forward(self, tokens):
        x = self.embed(tokens)
        return self.out(self.attention(x, x, x, need_weights=False)[0])


class NamespacedWithASwitch(Namespaced):
    def __init__(self, settings):
        super().__init__(settings)
        self.tied = settings.tie_word_embeddings


class PassedOn(nn.Module):
    def __init__(self, settings):
        super().__init__()
        self.inner = Namespaced(settings)


class Tokenized(nn.Module):
    def __init__(self, tokenizer, d_model):
        super().__init__()
        self.embed = nn.Embedding(tokenizer.vocab_size, d_model)


def test_the_attributes_read_on_an_options_namespace_are_found_in_the_source():
    assert namespace_reads(Namespaced, "settings") == ["vocabulary_size", "embedding_dim", "number_of_heads"]
    # read through super().__init__(settings) too: the subclass's own reads and its base's
    assert set(namespace_reads(NamespacedWithASwitch, "settings")) == {
        "tie_word_embeddings", "vocabulary_size", "embedding_dim", "number_of_heads"}
    assert namespace_reads(PassedOn, "settings") is None
    assert options_namespace(Namespaced, "settings") and not options_namespace(PassedOn, "settings")
    assert not options_namespace(Tokenized, "tokenizer")  # one size read on an object is no namespace


def test_an_options_namespace_is_given_small_sizes():
    loaded = build(Namespaced, "test:Namespaced", {})
    assert loaded.model.embed.num_embeddings == 101 and loaded.model.embed.embedding_dim == 32
    assert loaded.model.attention.num_heads == 4


def test_an_attribute_it_does_not_recognise_is_a_usage_error_naming_kwargs():
    with pytest.raises(SpecError) as raised:
        build(NamespacedWithASwitch, "test:NamespacedWithASwitch", {})
    message = str(raised.value)
    assert "settings.tie_word_embeddings" in message and """kwargs={"settings": {"tie_word_embeddings": VALUE}}""" \
        in message
    loaded = build(NamespacedWithASwitch, "test:NamespacedWithASwitch", {"settings": {"tie_word_embeddings": True}})
    assert loaded.model.tied is True and loaded.model.embed.embedding_dim == 32
