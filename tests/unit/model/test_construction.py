"""Construction (tfcheck/model/build/construction.py, configs.py, script_configs.py, recording_config.py,
small_sizes.py, import_limit.py): the recording config, dicts given for configs, configs a script writes under
__main__ or in a function, a fresh config per build, shrinking with its invariants,
shrink=false, kwargs keys kept, the defaults built when a constructor refuses the shrunk sizes, the import time
limit, the device argument, and the name patterns. The fixtures are tests/support/frontdoor_build/."""
from __future__ import annotations

import copy
import importlib.util
import json
import re
import time
from pathlib import Path

import pytest
import torch.nn as nn
from hypothesis import given, settings
from hypothesis import strategies as st

from tfcheck.engine.runner import load_subject
from tfcheck.errors import SpecError
from tfcheck.model.build import import_limit
from tfcheck.model.build.construction import plan_arguments, rebuild_at_defaults
from tfcheck.model.build.recording_config import AttrDict, RecordingConfig, to_config_object
from tfcheck.model.build.script_configs import script_configs
from tfcheck.model.build.small_sizes import plan, quantity
from tfcheck.model.facts import declarations as decl

HERE = Path(__file__).resolve().parents[2] / "support" / "frontdoor_build"


def spec(file: str, attr: str) -> str:
    return f"{HERE / file}:{attr}"


def declared(**values) -> dict[str, decl.Declared]:
    return decl.from_mapping(values, "test")


# ----- the recording config ----------------------------------------------------------------------------

def test_the_recording_config_answers_only_hyper_parameters():
    cfg = RecordingConfig()
    assert (cfg.d_model, cfg["n_heads"], cfg.get("dropout"), cfg.trg_pad_idx) == (32, 4, 0.1, 0)
    assert getattr(cfg, "causal", "as a config without it") == "as a config without it"
    assert cfg.get("bias", True) is True and "is_decoder" not in cfg and not hasattr(cfg, "activation")
    with pytest.raises(KeyError):
        cfg["qkv_bias"]
    assert set(cfg.read) == {"d_model", "n_heads", "dropout", "trg_pad_idx"}
    assert cfg.missing == ["causal", "bias", "is_decoder", "activation", "qkv_bias"]


def test_the_real_build_gets_a_dict_of_the_names_read_with_attribute_access():
    built = RecordingConfig({"tie": True}).as_built()
    built.d_model = 32
    assert isinstance(built, dict) and built.d_model == built["d_model"] == 32 and built.tie is True
    assert copy.deepcopy(built) == copy.copy(built) == dict(**built) == {"tie": True, "d_model": 32}
    assert "d_model" in built and list(built) == ["tie", "d_model"] and not hasattr(built, "bias")
    nested = to_config_object({"encoder": {"d_model": 16}, "layers": [{"heads": 2}]})
    assert nested.encoder.d_model == 16 and nested.layers[0].heads == 2 and isinstance(nested.encoder, AttrDict)


def test_a_getattr_default_and_a_hasattr_take_the_branch_of_a_config_without_the_field():
    subject = load_subject(spec("recorded_config_style.py", "Encoder"))
    assert subject.model.causal is False and subject.model.final_norm is None  # never invented
    assert subject.loaded.config_filled == {"vocab_size": 101, "d_model": 32, "max_len": 64, "n_layers": 2,
                                            "n_heads": 4, "d_ff": 64, "dropout": 0.1}
    assert subject.facts.kind == "encoder"


def test_a_hard_read_of_a_switch_names_it_and_the_declaration_and_the_hint_works_when_followed():
    with pytest.raises(SpecError) as info:
        load_subject(spec("recorded_config_style.py", "Decoder"))
    message = str(info.value)
    assert "cfg.tie_weights" in message and "recorded_config_style.py:31" in message and "never a switch" in message
    hinted = re.search(r"--set '(kwargs=.*?)'", message).group(1).replace("VALUE", "true")
    key, value = decl.parse_assignment(hinted, "the hint")
    subject = load_subject(spec("recorded_config_style.py", "Decoder"), {key: value})
    assert subject.model.head.weight is subject.model.embed.weight  # tie_weights as the user said
    assert subject.model.embed.embedding_dim == 32  # the user's key merged over the small sizes


# ----- dicts given for a config --------------------------------------------------------------------------

@pytest.mark.parametrize(("file", "attr", "given", "width"), [
    ("nanogpt_style.py", "GPT", {"config": {"n_embd": 48}}, lambda m: m.wte.embedding_dim),
    ("book_style.py", "GPTModel", {"cfg": {"emb_dim": 48, "qkv_bias": True}}, lambda m: m.tok_emb.embedding_dim),
    ("recorded_config_style.py", "Encoder", {"cfg": {"d_model": 48}}, lambda m: m.embed.embedding_dim),
    ("mingpt_style.py", "GPT", {"config": {"n_embd": 48, "n_head": 3}}, lambda m: m.tok_emb.embedding_dim),
])
def test_a_dict_given_for_a_config_becomes_the_config_the_constructor_expects(file, attr, given, width):
    # Before: "'dict' object has no attribute 'n_embd'" (the dict was passed as it was).
    subject = load_subject(spec(file, attr), declared(kwargs=given))
    assert width(subject.model) == 48
    heads = subject.model.modules()
    attention = next(m for m in heads if type(m).__name__ == "Attention")
    assert 48 % attention.n_heads == 0 and attention.d_k >= 4  # the small head count follows the user's width


def test_switches_of_a_module_level_config_are_kept_as_written():
    subject = load_subject(spec("book_style.py", "GPTModel"))
    assert subject.loaded.filled["cfg"]["qkv_bias"] is False
    assert subject.model.trf_blocks[0].attn.q.bias is None


# ----- a config a script writes under __main__ or in a function (read, never run) ------------------------

def _line_of(file: str, text: str) -> int:
    return next(i for i, line in enumerate((HERE / file).read_text().splitlines(), 1) if text in line)


def test_a_config_in_the_main_block_is_read_without_running_it_and_shrunk():
    # Before: "reads cfg["qkv_bias"] ..., and no config tfcheck found has it" (the literal is never run).
    subject = load_subject(spec("main_block_style.py", "GPTModel"))
    loaded = subject.loaded
    line = _line_of("main_block_style.py", "GPT_CONFIG_124M = {")
    assert loaded.config_sources["cfg"].startswith(
        f"GPT_CONFIG_124M (a config in the __main__ block of main_block_style.py:{line}, read from the source")
    assert loaded.filled["cfg"]["qkv_bias"] is True  # the script's later cfg["qkv_bias"] = True
    assert subject.model.trf_blocks[0].attn.q.bias is not None
    assert loaded.config_filled == {"vocab_size": 101}  # tiktoken's n_vocab is no literal: a size, filled small
    assert loaded.shrunk["emb_dim"] == (768, 32) and loaded.shrunk["n_layers"] == (12, 2)
    stated = {a.key: a.value for a in subject.assumptions}
    assert "the __main__ block of main_block_style.py" in str(stated["cfg built from"])


def test_a_config_in_main_is_read_and_preferred_to_other_functions():
    subject = load_subject(spec("main_function_style.py", "GPTModel"))
    line = _line_of("main_function_style.py", "cfg = dict(vocab_size=50257")
    assert subject.loaded.config_sources["cfg"].startswith(f"cfg (a config in main() of main_function_style.py:{line}")
    assert subject.loaded.filled["cfg"]["qkv_bias"] is True  # main()'s, not smoke_test()'s
    assert subject.model.tok_emb.embedding_dim == 32 and len(subject.model.trf_blocks) == 2


def test_a_main_block_config_without_a_field_the_constructor_reads_or_with_it_not_a_literal_is_not_used():
    with pytest.raises(SpecError) as info:
        load_subject(spec("main_block_unusable.py", "GPTModel"))
    message = str(info.value)
    assert 'cfg["qkv_bias"]' in message and "a config literal in the __main__ block" in message
    key, value = decl.parse_assignment(re.search(r"--set '(kwargs=.*?)'", message).group(1).replace("VALUE", "true"),
                                       "the hint")
    assert load_subject(spec("main_block_unusable.py", "GPTModel"), {key: value}).model.trf_blocks[0].attn.q.bias \
        is not None


def test_script_configs_reads_literals_in_order_and_leaves_out_what_only_running_shows(tmp_path):
    source = tmp_path / "script.py"
    source.write_text(
        "from types import SimpleNamespace\n"
        "def helper():\n"
        "    return {'d_model': 8, 'causal': True}\n"
        "def main():\n"
        "    hp = SimpleNamespace(d_model=512, n_layers=args.layers, causal=args.causal)\n"
        "    def inner():\n"
        "        never = {'d_model': 1}\n"
        "    spread = {**BASE, 'd_model': 4}\n"
        "    opts = dict(d_model=64)\n"
        "    opts.update({'bias': False}, tie=True)\n"
        "    opts['bias'] = args.bias\n"
        "if '__main__' == __name__:\n"
        "    if True:\n"
        "        cfg = {'d_model': 256, 'heads': 4}\n")
    module_spec = importlib.util.spec_from_file_location("script_under_test", source)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    found = [(c.name, c.scope, c.line, c.fields, c.namespace) for c in script_configs(module)]
    assert found == [
        ("cfg", "the __main__ block", 14, {"d_model": 256, "heads": 4}, False),
        # no literal: a size left unset (None, filled by tfcheck), a switch left out; **BASE unusable, inner() never
        ("hp", "main()", 5, {"d_model": 512, "n_layers": None}, True),
        ("opts", "main()", 9, {"d_model": 64, "tie": True}, False),  # bias set later from args: left out
        ("what helper() returns", "helper()", 3, {"d_model": 8, "causal": True}, False)]
    assert vars(script_configs(module)[1].make()) == {"d_model": 512, "n_layers": None}


# ----- a fresh config per build ------------------------------------------------------------------------

class _Marks:
    def __init__(self):
        self.d_model, self.n_heads, self.used = 512, 8, False


class MarksItsConfig(nn.Module):
    """Refuses a config already used by another build (as a constructor that mutates its config would break)."""

    made = 0

    @staticmethod
    def get_default_config():
        MarksItsConfig.made += 1
        return _Marks()

    def __init__(self, config):
        super().__init__()
        assert not config.used, "this config was already built from"
        config.used = True
        self.embed = nn.Embedding(11, config.d_model)
        self.proj = nn.Linear(config.d_model, config.d_model)

    def forward(self, x):
        return self.proj(self.embed(x))


def test_a_constructor_that_mutates_its_config_gets_a_fresh_one_for_each_build():
    MarksItsConfig.made = 0
    subject = load_subject(MarksItsConfig)
    assert subject.model.proj.in_features == 32
    assert MarksItsConfig.made >= 3  # read once for its defaults, then one for the size guard, one for the build


def test_mingpts_model_type_is_cleared_when_tfcheck_states_the_sizes():
    subject = load_subject(spec("mingpt_style.py", "GPT"))
    config = subject.loaded.filled["config"]
    assert config.model_type is None and (config.n_layer, config.n_head, config.n_embd) == (2, 4, 32)
    assert subject.loaded.config_filled["vocab_size"] == 101 and subject.loaded.config_filled["block_size"] == 64


# ----- shrinking ----------------------------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(heads=st.integers(1, 64), head_dim=st.integers(1, 256), layers=st.integers(1, 96),
       vocab=st.integers(2, 300_000), kv=st.integers(1, 64), pad=st.integers(0, 300_000),
       alias=st.booleans(), separate_dk=st.booleans())
def test_shrunk_defaults_keep_their_invariants(heads, head_dim, layers, vocab, kv, pad, alias, separate_dk):
    kv = max(d for d in range(1, heads + 1) if heads % d == 0 and d <= kv)  # a valid default: kv divides heads
    pad = min(pad, vocab - 1)
    d_model = heads * head_dim
    values = {"d_model": d_model, "n_head": heads, "n_layers": layers, "vocab_size": vocab, "n_kv_heads": kv,
              "pad_idx": pad, **({"d_word_vec": d_model} if alias else {}),
              **({"d_k": head_dim, "d_v": head_dim} if separate_dk else {})}
    small = {**values, **plan(values, list(values))}
    width, h = small["d_model"], small["n_head"]
    assert width % h == 0
    if width != d_model:  # shrunk: heads of 4 or more, two heads or more (unless the model has one)
        assert width // h >= 4 and (h >= 2 or heads == 1) and (width // h != width or heads == 1)
    assert width <= max(d_model, 32) and small["n_layers"] <= max(2, min(layers, 2) if layers > 2 else layers)
    assert small["vocab_size"] <= 101 or small["vocab_size"] == vocab
    assert h % small["n_kv_heads"] == 0 and small["pad_idx"] < small["vocab_size"]
    if alias:
        assert small["d_word_vec"] == width
    if separate_dk:
        assert small["d_k"] == small["d_v"] == width // h


@pytest.mark.parametrize("kv_name", ["n_kv_head", "n_kv_heads", "n_head_kv", "n_query_groups", "num_key_value_heads"])
def test_a_grouped_query_head_count_is_shrunk_with_the_heads_however_it_is_spelled(kv_name):
    # Built at full size when missed: llama-7B's 32 heads over 8 kv heads would stay 4096 wide.
    values = {"n_head": 32, kv_name: 8, "n_embd": 4096, "n_layer": 32, "vocab_size": 32000}
    small = {**values, **plan(values, list(values))}
    assert small["n_embd"] == 32 and small["n_head"] % small[kv_name] == 0 and small[kv_name] < 8
    assert quantity("n_kv_head_dim") is None  # a head's width is no head count


def test_a_max_len_at_or_below_the_small_value_is_kept_and_a_large_one_is_tfchecks():
    assert plan({"block_size": 32, "n_embd": 768}, ["block_size", "n_embd"]) == {"n_embd": 32}
    assert plan({"block_size": 1024}, ["block_size"]) == {"block_size": 64}


def test_top_k_never_exceeds_the_experts_and_special_ids_stay_in_the_vocabulary():
    assert plan({"num_experts": 64, "num_experts_per_tok": 8, "vocab_size": 50257, "eos_token_id": 50256,
                 "bos_token_id": 1}, ["num_experts", "num_experts_per_tok", "vocab_size", "eos_token_id",
                                      "bos_token_id"]) == {"num_experts": 4, "num_experts_per_tok": 2,
                                                           "vocab_size": 101, "eos_token_id": 2}


def test_shrink_false_keeps_the_model_as_written():
    subject = load_subject(spec("size_constraint_style.py", "Model"), declared(shrink=False))
    assert subject.model.embed.embedding_dim == 256 and subject.loaded.shrunk == {}
    assert subject.loaded.size_constraint is None and "constructor arguments shrunk" not in \
        {a.key for a in subject.assumptions}


def test_a_kwargs_key_keeps_its_value_and_the_rest_follows_it():
    subject = load_subject(spec("annotated_style.py", "make_model"), declared(kwargs={"d_model": 64}))
    assert subject.loaded.shrunk == {"N": (6, 2), "d_ff": (2048, 64), "h": (8, 4)}
    assert subject.model.src_embed.lut.embedding_dim == 64


def test_a_constructor_that_refuses_the_shrunk_sizes_is_built_at_its_defaults_with_the_constraint_stated():
    subject = load_subject(spec("size_constraint_style.py", "Model"))
    assert subject.model.embed.embedding_dim == 256 and subject.loaded.shrunk == {}
    constraint = next(a for a in subject.assumptions if a.key == "size constraint")
    assert "d_model 256→32" in constraint.value and "AssertionError: d_model must be at least 128" in constraint.value
    assert "size_constraint_style.py:9" in constraint.value


class Rebuildable(nn.Module):
    def __init__(self, d_model=128, n_heads=8):
        super().__init__()
        self.embed = nn.Embedding(11, d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.n_heads = n_heads

    def forward(self, x):
        return self.proj(self.embed(x))


def test_rebuild_at_defaults_builds_the_model_as_written_from_the_same_seed():
    loaded = load_subject(Rebuildable).loaded
    assert loaded.shrunk == {"d_model": (128, 32), "n_heads": (8, 4)}
    again = rebuild_at_defaults(loaded)
    assert again.model.proj.in_features == 128 and again.shrunk == {}
    assert rebuild_at_defaults(again).model.proj.weight.equal(again.model.proj.weight)


# ----- arguments -----------------------------------------------------------------------------------------

def test_the_device_argument_is_the_runs_device():
    arguments = plan_arguments(spec_origin("positional_names_style.py", "Transformer"), {}, "spec", device="cuda:1")
    assert arguments.values["device"] == "cuda:1" and arguments.filled["device"] == "cuda:1"


def spec_origin(file: str, attr: str):
    from tfcheck.model.build.spec import import_target, resolve_attr

    target = str(HERE / file)
    return resolve_attr(import_target(target), target, attr)


@pytest.mark.parametrize(("name", "expected"), [
    ("n_src_vocab", "VOCAB_SIZE"), ("n_trg_vocab", "VOCAB_SIZE"), ("enc_voc_size", "VOCAB_SIZE"),
    ("src_vocab", "VOCAB_SIZE"), ("ffn_hidden", "D_FF"), ("d_inner_hid", "D_FF"), ("hidden_size", "D_MODEL"),
    ("drop_prob", "DROPOUT"), ("drop_rate", "DROPOUT"), ("src_pad_idx", "PAD_ID"), ("trg_sos_idx", "BOS_TOKEN_ID"),
    ("eos_id", "EOS_TOKEN_ID"), ("qkv_bias", None), ("causal", None), ("activation", None), ("N", None), ("h", None),
    ("embed_size", "D_MODEL"), ("emb_size", "D_MODEL"), ("num_positions", "MAX_LEN"),
    # switches and bare module names are no sizes: a recording config must not answer them
    ("use_dropout", None), ("no_dropout", None), ("apply_dropout", None), ("is_drop", None), ("mlp", None),
    ("ffn", None), ("ff", None), ("inner", None), ("ffn_size", "D_FF"),
])
def test_names_outside_the_exact_tables_are_read_by_their_patterns(name, expected):
    assert quantity(name) == expected


def test_n_and_h_are_layers_and_heads_only_beside_a_width():
    beside = ["src_vocab", "tgt_vocab", "N", "d_model", "d_ff", "h", "dropout"]
    assert (quantity("N", beside), quantity("h", beside)) == ("NUM_LAYERS", "NUM_HEADS")
    # N beside a width alone may be anything; h beside a width is the head count (MultiHeadedAttention(h, d_model))
    assert quantity("N", ["N", "d_model"]) is None and quantity("h", ["h", "d_model", "d_ff"]) == "NUM_HEADS"
    assert quantity("h", ["h", "d_ff"]) is None and quantity("N", ["N", "h"]) is None
    assert quantity("hidden_dim", ["dim", "hidden_dim"]) == "D_FF" and quantity("hidden_dim") == "D_MODEL"


# ----- a model file that runs a script when imported -------------------------------------------------------

def test_a_model_file_that_runs_a_script_at_import_is_stopped_and_told_to_guard_it(monkeypatch):
    monkeypatch.setattr(import_limit, "IMPORT_LIMIT_S", 0.3)
    started = time.monotonic()
    with pytest.raises(SpecError) as info:
        load_subject(spec("slow_script.py", "Model"))
    assert time.monotonic() - started < 5  # the script would take 10 s
    message = str(info.value)
    assert "did not finish within 0.3 s" in message and 'if __name__ == "__main__":' in message
    assert "slow_script.py:" in message


def test_the_import_limit_leaves_no_handler_behind():
    import signal

    before = signal.getsignal(import_limit.LIMIT_SIGNAL)
    with import_limit.import_time_limit(5):
        pass
    assert signal.getsignal(import_limit.LIMIT_SIGNAL) == before


def test_kwargs_for_a_config_is_valid_json_as_the_hint_prints_it():
    assert decl.parse_value("kwargs", json.dumps({"cfg": {"qkv_bias": False}}), "t").value == \
        {"cfg": {"qkv_bias": False}}


class NeedsAPath(nn.Module):
    def __init__(self, vocab_path, d_model=256):
        super().__init__()
        self.vocab_path = vocab_path
        self.embed = nn.Embedding(11, d_model)

    def forward(self, x):
        return self.embed(x)


def test_an_argument_tfcheck_cannot_guess_is_named_with_the_declaration_and_a_factory_and_the_hint_works():
    with pytest.raises(SpecError) as info:
        load_subject(NeedsAPath)
    message = str(info.value)
    assert "needs argument(s) vocab_path" in message and "--set 'kwargs={\"vocab_path\": ...}'" in message
    assert "def make_model():\n        return NeedsAPath(vocab_path=...)" in message
    subject = load_subject(NeedsAPath, declared(kwargs={"vocab_path": "vocab.txt"}))
    assert subject.model.vocab_path == "vocab.txt" and subject.model.embed.embedding_dim == 32


class EmbedSizeTransformer(nn.Module):
    """The from-scratch tutorials' names: embed_size (Aladdin Persson's, and simple-transformer on PyPI) and
    emb_size (PyTorch's translation tutorial) are the model width."""

    def __init__(self, src_vocab_size, embed_size=512, heads=8, emb_size=None):
        super().__init__()
        self.embed = nn.Embedding(src_vocab_size, embed_size)
        self.width, self.heads = embed_size, heads


def test_embed_size_and_emb_size_are_the_width_and_are_shrunk_with_the_heads():
    model = load_subject(EmbedSizeTransformer, {}).model
    assert (model.width, model.heads) == (32, 4) and model.embed.embedding_dim == 32


class WantsATupleOfDepths(nn.Module):
    """A constructor whose type check refuses the int tfcheck fills for depth (MEGABYTE takes one depth per stage)."""

    def __init__(self, num_tokens, dim, depth):
        super().__init__()
        if not isinstance(depth, tuple):
            raise TypeError(f"parameter depth={depth!r} violates type hint tuple")
        self.embed = nn.Embedding(num_tokens, dim)


def test_a_value_tfcheck_chose_that_the_constructor_refuses_is_named_with_the_kwargs_to_give():
    with pytest.raises(SpecError) as refused:
        load_subject(WantsATupleOfDepths, declared())
    message = str(refused.value)
    assert "tfcheck chose depth=2 and the constructor refused it" in message
    assert "--set 'kwargs={\"depth\": VALUE}'" in message
    assert "num_tokens" not in message.split("raised TypeError")[1]  # only the names the error names


class LSHBuckets(nn.Module):
    """reformer-pytorch's shape: inputs must be a multiple of twice the bucket size, 128 by default, which no length
    under the small max_len is."""

    def __init__(self, num_tokens, dim, max_seq_len, bucket_size=64):
        super().__init__()
        self.bucket_size = bucket_size
        self.embed = nn.Embedding(num_tokens, dim)


def test_a_bucket_size_is_shrunk_so_that_lengths_under_the_small_max_len_are_multiples_of_it():
    loaded = load_subject(LSHBuckets).loaded
    assert loaded.shrunk["bucket_size"] == (64, 4)
    assert 2 * loaded.model.bucket_size <= loaded.filled["max_seq_len"]
