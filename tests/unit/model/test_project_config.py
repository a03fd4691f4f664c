"""pyproject.toml's [tool.tfcheck] in any shape (issue 35, configuration class): entries read, or a usage error
that names the file, the key and what belongs there; never a traceback, never silently ignored."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfcheck.errors import UsageError
from tfcheck.model.facts.project_config import entries_of, model_entries

FILE = Path("pyproject.toml")

#: Any TOML value: scalars, arrays and tables of them, nested.
TOML_VALUES = st.recursive(
    st.none().map(lambda _: "x") | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(
        ["spec", "kind", "models", "mask", "colour", "name", "kwargs", "tfcheck"]), inner, max_size=3),
    max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["tool", "project"]), TOML_VALUES | st.fixed_dictionaries(
    {"tfcheck": TOML_VALUES | st.fixed_dictionaries({"models": TOML_VALUES})}), max_size=2))
def test_any_shape_of_pyproject_gives_entries_or_a_usage_error(data):
    try:
        entries_of(data, FILE)
    except UsageError as refused:
        assert "pyproject.toml" in str(refused)


@pytest.mark.parametrize("text, said", [
    ("tool = 3", "tool = 3 is an integer; tool must be a table"),
    ("[tool]\ntfcheck = 'x'", "tool.tfcheck = 'x' is a string; it must be a table"),
    ("[tool.tfcheck]\nkind = 'decoder'", "tool.tfcheck.kind: a declaration belongs to one model"),
    ("[tool.tfcheck]\nmodel = []", "unknown key tool.tfcheck.model; did you mean models"),
    ("[[tool.tfcheck.models]]\nspec = 'm:M'\ncolour = 1", "unknown tfcheck declaration 'colour'"),
    ("[tool.tfcheck\n", "cannot read"),
])
def test_a_wrong_pyproject_is_a_usage_error_naming_what_is_wrong(tmp_path, text, said):
    path = tmp_path / "pyproject.toml"
    path.write_text(text)
    with pytest.raises(UsageError) as refused:
        model_entries(path)
    message = str(refused.value)
    assert said in message and "pyproject.toml" in message, message


def test_other_tools_tables_are_not_tfchecks_business(tmp_path):
    path = tmp_path / "pyproject.toml"
    path.write_text("[tool.ruff]\nline-length = 3\n[[tool.tfcheck.models]]\nspec = 'm:M'\nkind = 'decoder'\n")
    (entry,) = model_entries(path)
    assert entry.spec == "m:M" and entry.declared["kind"].value == "decoder"
