"""The construction-site recorder: the build tfcheck performs notes the user's line that registered each
submodule, parameter and buffer, last wrote a parameter in place and froze one; the lines are read from the
``# site:`` marks below, never written as numbers. The build leaves nothing behind, even when it raises."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.modules.module as module_api

from tfcheck.model.build.construction import build, built_seeded
from tfcheck.model.build.construction_sites import INSTANCE_REASON, watched_build
from tfcheck.model.build.loaded import Loaded
from tfcheck.model.subject import Subject

SOURCE = Path(__file__)


def marked(name: str) -> tuple[str, int]:
    """(this file, the line marked ``# site: name``)."""
    for n, text in enumerate(SOURCE.read_text().splitlines(), 1):
        if re.search(rf"#\s*site:\s*{name}\b", text):
            return str(SOURCE), n
    raise AssertionError(f"no line marked '# site: {name}'")


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.proj = nn.Linear(d, d)  # site: proj


class Sited(nn.Module):
    def __init__(self, d_model=8):
        super().__init__()
        self.block = Block(d_model)  # site: block
        self.scale = nn.Parameter(torch.ones(d_model))  # site: scale
        self.register_buffer("mask", torch.ones(4, 4).tril())  # site: mask
        self.head = nn.Linear(d_model, 5)  # site: head
        nn.init.normal_(self.head.weight, std=1.0)  # site: head_init
        self.block.proj.requires_grad_(False)  # site: freeze

    def forward(self, x):
        return self.head(self.block.proj(x) * self.scale)


class Raises(nn.Module):
    def __init__(self, d_model=8):
        super().__init__()
        self.a = nn.Linear(d_model, d_model)
        raise RuntimeError("refused")


def sites_of(cls):
    return built_seeded(cls, f"test:{cls.__name__}", {}).sites


def at(site) -> tuple[str, int]:
    return str(Path(site.file)), site.line


def test_submodules_parameters_and_buffers_get_the_line_that_registered_them():
    sites = sites_of(Sited)
    assert at(sites.modules["block"]) == marked("block")
    assert at(sites.modules["block.proj"]) == marked("proj")  # built in torch's Linear: the user's line calling it
    assert at(sites.parameters["block.proj.weight"]) == marked("proj")
    assert at(sites.parameters["scale"]) == marked("scale")
    assert at(sites.buffers["mask"]) == marked("mask")
    assert at(sites.of("head")) == marked("head")


def test_an_init_after_construction_and_a_freeze_are_noted_on_the_parameter():
    sites = sites_of(Sited)
    assert at(sites.written["head.weight"]) == marked("head_init")
    assert at(sites.written["head.bias"]) == marked("head")  # only torch's own init: the construction line
    assert at(sites.frozen["block.proj.weight"]) == marked("freeze")
    assert at(sites.frozen["block.proj.bias"]) == marked("freeze")
    assert "head.weight" not in sites.frozen


def test_a_freeze_undone_is_forgotten():
    with watched_build() as sites_of_model:
        model = Sited()
        model.block.proj.requires_grad_(True)
    assert sites_of_model(model).frozen == {}


def _global_state():
    return (len(module_api._global_module_registration_hooks), len(module_api._global_parameter_registration_hooks),
            len(module_api._global_buffer_registration_hooks), torch._C._len_torch_function_stack())


def test_nothing_is_left_behind_when_the_constructor_raises():
    before = _global_state()
    with pytest.raises(Exception, match="refused"):
        build(Raises, "test:Raises", {})
    assert _global_state() == before


def test_the_built_model_is_the_one_an_unwatched_build_makes():
    before = _global_state()
    watched = built_seeded(Sited, "test:Sited", {}).model
    assert _global_state() == before
    torch.manual_seed(0)
    plain = Sited()
    assert [(n, p.requires_grad) for n, p in watched.named_parameters()] == \
        [(n, p.requires_grad) for n, p in plain.named_parameters()]
    assert all(torch.equal(a, b) for a, b in zip(watched.state_dict().values(), plain.state_dict().values()))
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in watched.modules())


def test_the_subject_names_the_site_or_the_reason():
    loaded = built_seeded(Sited, "test:Sited", {})
    subject = Subject(loaded, {})
    site = subject.construction_site("block.proj.weight")
    assert (site.module, str(Path(site.file).resolve()), site.line) == ("block.proj", *marked("proj"))
    assert subject.construction_site("block.proj", kind="frozen").reason  # a module is never frozen itself
    root = subject.construction_site("")
    assert root.module == "" and root.file is None and root.reason


def test_a_model_given_as_an_instance_gets_the_reason():
    model = Sited()
    subject = Subject(Loaded(model, "test:instance", model, constructed=False), {})
    site = subject.construction_site("head")
    assert (site.module, site.file, site.reason) == ("head", None, INSTANCE_REASON)
