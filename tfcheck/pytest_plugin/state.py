"""What one pytest session of the plugin knows: its settings, the models to collect, the results gathered."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tfcheck.pytest_plugin.settings import Settings

if TYPE_CHECKING:
    from tfcheck.model.facts.project_config import Entry
    from tfcheck.pytest_plugin.anchors import Requested


@dataclass
class PluginState:
    settings: Settings
    #: the models to collect with the session's tests, each with whether only --tfcheck-all brought it
    listed: list[tuple[Entry, bool]]
    #: the models the command line names by item id (``model.py::tfcheck[model.py:GPT]::mask.causal``)
    requested: list[Requested]
    plain_paths: set[Path]  # files the command line names otherwise: their own tests are collected as usual
    cli: dict  # the --tfcheck-set declarations, parsed
    pyproject: Path | None
    json_path: Path | None
    invocation_dir: Path
    images: bool = False
    labels: list[str] = field(default_factory=list)  # the models' report names in collection order
    results: list[dict] = field(default_factory=list)  # payloads from test reports, xdist-safe

    @property
    def strict(self) -> bool:
        return self.settings.strict

    @property
    def format(self) -> str:
        return self.settings.format


STATE = pytest.StashKey[PluginState]()
#: The settings alone, stashed in every session: the tfcheck_run fixture reads them without any --tfcheck model.
SETTINGS = pytest.StashKey[Settings]()
