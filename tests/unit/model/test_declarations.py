"""Declarations: one typed registry of keys; bad keys and values are errors that say what is valid."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tfcheck.errors import DeclarationError
from tfcheck.model.facts import declarations as decl

identifiers = st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True)


@given(identifiers.filter(lambda k: k not in decl.KEYS))
def test_any_unknown_key_is_rejected_with_the_valid_keys(key):
    with pytest.raises(DeclarationError) as info:
        decl.parse_value(key, "1", "--set")
    assert all(k in str(info.value) for k in decl.KEYS)


@given(identifiers, st.sampled_from(decl.MASK_CONVENTIONS))
def test_mask_declarations_round_trip(argument, convention):
    parsed = decl.parse_value("mask", f"{argument}:{convention}", "--set").value
    assert (parsed.argument, parsed.convention) == (argument, convention)
    assert str(parsed) == f"{argument}:{convention}"


@given(st.text().filter(lambda t: t not in ("internal", "none") and not (
        ":" in t and t.partition(":")[0].isidentifier() and t.partition(":")[2] in decl.MASK_CONVENTIONS)))
def test_malformed_masks_are_rejected_with_the_syntax(text):
    with pytest.raises(DeclarationError, match="Syntax: mask="):
        decl.parse_value("mask", text, "--set")


@pytest.mark.parametrize("key,text,value", [
    ("kind", "decoder", "decoder"), ("causal", "false", False), ("causal", True, True),
    ("vocab_size", "500", 500), ("pad_id", "none", None), ("pad_id", "3", 3), ("output", "logits", "logits"),
    ("output", "0", 0), ("accept", "shape.contract:pooled output", {"shape.contract": "pooled output"}),
    ("kwargs", '{"vocab_size": 7}', {"vocab_size": 7}),
])
def test_values_parse_from_text_and_from_toml(key, text, value):
    assert decl.parse_value(key, text, "--set").value == value


@pytest.mark.parametrize("key,text", [
    ("kind", "gpt"), ("causal", "maybe"), ("vocab_size", "0"), ("vocab_size", True), ("output", "a b"),
    ("accept", "shape.contract"), ("accept", "shape.contract: "), ("kwargs", "{not json"), ("inputs", "nocolon"),
])
def test_bad_values_name_the_key_the_source_and_the_syntax(key, text):
    with pytest.raises(DeclarationError) as info:
        decl.parse_value(key, text, "pyproject.toml")
    message = str(info.value)
    assert repr(key) in message and "pyproject.toml" in message and f"Syntax: {key}=" in message


def test_assignments_and_precedence():
    key, cli = decl.parse_assignment("kind = encoder", "--set")
    assert key == "kind"
    merged = decl.merge({"kind": cli}, {"kind": decl.Declared("decoder", "__tfcheck__"),
                                        "pad_id": decl.Declared(0, "__tfcheck__")})
    assert merged["kind"].value == "encoder" and merged["kind"].source == "--set"
    assert merged["pad_id"].value == 0
    with pytest.raises(DeclarationError, match="expected KEY=VALUE"):
        decl.parse_assignment("kind", "--set")
