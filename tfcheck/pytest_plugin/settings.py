"""The plugin's command-line options and ini keys, and the settings they make: the command line over the ini file
(``[tool.pytest.ini_options]`` of pyproject.toml, pytest.ini, tox.ini, setup.cfg)."""
from __future__ import annotations

import argparse
from dataclasses import dataclass

import pytest

from tfcheck.errors import UsageError
from tfcheck.model.facts.declarations import BUDGET_OVERRUNS
from tfcheck.ui.annotations import FORMATS


@dataclass(frozen=True)
class Settings:
    specs: tuple[str, ...]  # --tfcheck, or the ini's tfcheck when the command line names no model
    include_all: bool  # --tfcheck-all, or the ini's tfcheck_all
    from_ini: bool  # the models come from the ini file: collected only when pytest is given no paths
    declarations: tuple[str, ...]  # --tfcheck-set KEY=VALUE texts
    strict: bool
    format: str
    #: the budget_overrun declaration for every model (None: each model's own, else "skip"), and what set it
    budget_overrun: str | None
    overrun_source: str | None

    @property
    def names_models(self) -> bool:
        return bool(self.specs) or self.include_all


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("tfcheck", "Transformer diagnostics (tfcheck)")
    group.addoption("--tfcheck", action="append", default=[], metavar="SPEC",
                    help="run the tfcheck battery on a model: MODULE:ATTR or path/to/file.py:ATTR (repeatable)")
    group.addoption("--tfcheck-all", action="store_true",
                    help="run the tfcheck battery on every model in [[tool.tfcheck.models]] of pyproject.toml")
    group.addoption("--tfcheck-set", action="append", default=[], metavar="KEY=VALUE",
                    help="a declaration for every --tfcheck model, e.g. kind=decoder (see `tfcheck list`)")
    group.addoption("--tfcheck-strict", action=argparse.BooleanOptionalAction, default=None,
                    help="tfcheck warnings (and budget overruns) fail their items; overrides ini tfcheck_strict")
    group.addoption("--tfcheck-json", metavar="PATH", help="write the tfcheck report as JSON to PATH")
    group.addoption("--tfcheck-images", action="store_true",
                    help="with --tfcheck-json: draw each leak map as a PNG beside the report (needs matplotlib)")
    group.addoption("--tfcheck-format", choices=FORMATS, default=None,
                    help="github: also print a GitHub Actions ::error/::warning annotation per tfcheck problem")
    group.addoption("--tfcheck-budget-overrun", choices=BUDGET_OVERRUNS, default=None,
                    help="a check stopped by its time budget is skipped (default) or fails (default under "
                         "strict); the same as --tfcheck-set budget_overrun=...")
    add_ini = parser.addini
    add_ini("tfcheck", "tfcheck: models to check, as --tfcheck SPEC (used when the command line names none)",
            type="linelist", default=[])
    add_ini("tfcheck_all", "tfcheck: check every [[tool.tfcheck.models]] entry, as --tfcheck-all", type="bool",
            default=False)
    add_ini("tfcheck_strict", "tfcheck: warnings fail their items, as --tfcheck-strict", type="bool", default=False)
    add_ini("tfcheck_format", f"tfcheck: report format, as --tfcheck-format ({' or '.join(FORMATS)})",
            type="string", default="")
    add_ini("tfcheck_budget_overrun", f"tfcheck: as --tfcheck-budget-overrun ({' or '.join(BUDGET_OVERRUNS)})",
            type="string", default="")


def read_settings(config: pytest.Config) -> Settings:
    """The settings of this run; an ini value that is not allowed is a UsageError naming the file."""
    opt = config.option
    from_ini = not (opt.tfcheck or opt.tfcheck_all)
    specs = tuple(config.getini("tfcheck")) if from_ini else tuple(opt.tfcheck)
    include_all = bool(config.getini("tfcheck_all")) if from_ini else bool(opt.tfcheck_all)
    strict = opt.tfcheck_strict if opt.tfcheck_strict is not None else bool(config.getini("tfcheck_strict"))
    fmt = opt.tfcheck_format or _ini_choice(config, "tfcheck_format", FORMATS) or "text"
    overrun, source = _overrun(config, strict)
    return Settings(specs, include_all, from_ini and bool(specs or include_all), tuple(opt.tfcheck_set), strict,
                    fmt, overrun, source)


def _overrun(config: pytest.Config, strict: bool) -> tuple[str | None, str | None]:
    """The budget policy and its source: the command line's option, else its strictness, else the ini's key, else
    the ini's strictness (strict implies fail, as tfcheck check --strict does); (None, None) when none says."""
    opt = config.option
    ini = _ini_choice(config, "tfcheck_budget_overrun", BUDGET_OVERRUNS)
    for value, source in ((opt.tfcheck_budget_overrun, "--tfcheck-budget-overrun"),
                          ("fail" if opt.tfcheck_strict else None, "--tfcheck-strict"),
                          (ini, "ini tfcheck_budget_overrun"), ("fail" if strict else None, "ini tfcheck_strict")):
        if value:
            return value, source
    return None, None


def _ini_choice(config: pytest.Config, key: str, choices: tuple[str, ...]) -> str | None:
    value = str(config.getini(key) or "").strip()
    if value and value not in choices:
        raise UsageError(f"{key} = {value!r} in {config.inipath or 'the ini file'}: choose one of "
                         f"{', '.join(choices)}")
    return value or None
