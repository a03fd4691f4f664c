"""The pytest plugin: ``pytest --tfcheck SPEC`` runs the battery as one test item per check per model.

Only wiring lives here (the parts are in tfcheck.pytest_plugin); the library does the work. Importing this
module does not import torch: that happens when a model is collected, so ``pytest --help`` stays fast.
"""
from __future__ import annotations

import sys

import pytest

from tfcheck.errors import TfcheckError
from tfcheck.pytest_plugin.fixture import TfcheckRun
from tfcheck.pytest_plugin.nodes import TfcheckFile, TfcheckItem, TfcheckModel
from tfcheck.pytest_plugin.settings import Settings, add_options, read_settings
from tfcheck.pytest_plugin.state import SETTINGS, STATE, PluginState
from tfcheck.pytest_plugin.verdicts import TfcheckFailure, TfcheckLoadError, TfcheckWarning
from tfcheck.pytest_plugin.workers import follow_controller, group_by_model
from tfcheck.ui.streams import never_failing

# Public names of this path: filterwarnings = "error::tfcheck.plugin.TfcheckWarning" and the like.
__all__ = ["TfcheckFailure", "TfcheckFile", "TfcheckItem", "TfcheckLoadError", "TfcheckModel", "TfcheckRun",
           "TfcheckWarning", "pytest_addoption", "pytest_configure", "tfcheck_run"]


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    register_markers(config)
    follow_controller(config)
    try:
        settings = read_settings(config)
    except TfcheckError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[SETTINGS] = settings
    from tfcheck.pytest_plugin.anchors import plain_paths, requested_models

    base = config.invocation_params.dir
    requested = requested_models(list(config.args), base)
    # The ini file's models join the runs that collect from pytest's defaults (no paths given); a command line
    # naming paths or ids runs those, and its own --tfcheck models.
    listing = settings.names_models and not (settings.from_ini and config.args_source == config.ArgsSource.ARGS)
    if not (listing or requested):
        return
    state = session_state(config, settings, listing)
    state.requested, state.plain_paths = requested, plain_paths(list(config.args), base)  # read from the args
    config.stash[STATE] = state
    # pytest's terminal writer prints a line it cannot encode escaped whole (\n and all): spelled, it stays readable
    never_failing(sys.__stdout__, sys.__stderr__)
    from tfcheck.pytest_plugin.session import TfcheckSession

    config.pluginmanager.register(TfcheckSession(state, config), "tfcheck-session")
    group_by_model(config)  # -n N alone keeps each model's items on one worker (tfcheck.pytest_plugin.workers)


def register_markers(config: pytest.Config) -> None:
    """Always, so that ``--strict-markers`` accepts ``@pytest.mark.tfcheck`` on a user's own tests."""
    from tfcheck.engine.registry import GROUPS

    config.addinivalue_line("markers", "tfcheck: a tfcheck battery item, or a test of yours that runs tfcheck "
                                       "(-m tfcheck, -m 'not tfcheck')")
    for group, what in GROUPS.items():
        config.addinivalue_line("markers", f"tfcheck_{group}: a tfcheck battery item of the {group} group: {what}")


def session_state(config: pytest.Config, settings: Settings, listing: bool) -> PluginState:
    """The models of the run and where its report goes, checked before anything is collected."""
    from tfcheck.model.build.spec import split_spec
    from tfcheck.model.facts import declarations as decl
    from tfcheck.model.facts.project_config import find_pyproject, models_to_run, unique_specs

    opt = config.option
    listed: list = []
    try:
        cli = dict(decl.parse_assignment(text, "--tfcheck-set") for text in settings.declarations)
        if settings.budget_overrun is not None and "budget_overrun" not in cli:  # a --tfcheck-set is more explicit
            cli["budget_overrun"] = decl.parse_value("budget_overrun", settings.budget_overrun,
                                                     str(settings.overrun_source))
        pyproject = find_pyproject(config.rootpath)
        if listing:
            given, repeated = unique_specs(list(settings.specs))
            if repeated:
                _config_warning(config, f"tfcheck: --tfcheck {', '.join(sorted(set(repeated)))} given more than "
                                        "once: checked once")
            entries = models_to_run(given, pyproject, include_all=settings.include_all)
            if settings.include_all and len(entries) == len(given):
                raise TfcheckError(f"--tfcheck-all: no [[tool.tfcheck.models]] entries in "
                                   f"{pyproject or 'pyproject.toml (none found)'}")
            for entry in entries:
                split_spec(entry.spec)
            listed = [(entry, entry.spec not in given) for entry in entries]
    except TfcheckError as exc:
        raise pytest.UsageError(str(exc)) from None
    if opt.tfcheck_json == "":
        raise pytest.UsageError("--tfcheck-json needs a PATH (--tfcheck-json report.json)")
    if opt.tfcheck_images and not opt.tfcheck_json:
        raise pytest.UsageError("--tfcheck-images draws the leak maps beside the JSON report: give --tfcheck-json PATH")
    json_path = None
    if opt.tfcheck_json:
        from tfcheck.ui.io import writable_path

        try:
            json_path = writable_path(opt.tfcheck_json, "--tfcheck-json")  # refused before any item runs
        except TfcheckError as exc:
            raise pytest.UsageError(str(exc)) from None
    return PluginState(settings, listed, [], set(), cli, pyproject, json_path, config.invocation_params.dir,
                       opt.tfcheck_images)


def _config_warning(config: pytest.Config, message: str) -> None:
    """A configuration warning; under -W error (or filterwarnings = error) a usage error that says it, never an
    INTERNALERROR of pytest_configure."""
    try:
        config.issue_config_time_warning(pytest.PytestConfigWarning(message), 3)
    except Warning as exc:
        raise pytest.UsageError(f"{exc} (a warning, raised as an error by the warning filters)") from None


@pytest.fixture
def tfcheck_run(request: pytest.FixtureRequest) -> TfcheckRun:
    """tfcheck for your own tests: ``tfcheck_run.check(model, **declarations)`` returns the report,
    ``tfcheck_run.assert_pass(model, **declarations)`` fails with its problems as text."""
    return TfcheckRun(request.config.stash[SETTINGS])
