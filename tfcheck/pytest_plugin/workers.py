"""The plugin under pytest-xdist: which scheduler runs the items, and how many threads a worker's checks use.

A model's checks share its work (the trial forward, the recorded passes): spread over workers by xdist's default
``load`` scheduling, each worker repeats it. So ``-n N`` with tfcheck models and no ``--dist`` of the user's runs
as ``--dist loadgroup``, which keeps the items of one ``xdist_group`` (one model) on one worker; a ``--dist``
given anywhere (command line, ``PYTEST_ADDOPTS``, ini ``addopts``) is kept.

Each worker is a process whose torch would start one intra-op thread per core: N workers on C cores would run
N x C threads, and torch's threads wait for each other by spinning, so two workers on two cores ran slower than
one process. A tfcheck item on a worker runs with its share of the cores (C // N, at least one) unless the user
chose a thread count (``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``); the count is restored after the item, so the
user's own tests in that worker run as they would without tfcheck.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest

#: Variables by which a user fixes torch's thread count: their choice is kept.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
#: The workerinput key by which the controller tells a worker that it chose loadgroup.
GROUPED = "tfcheck_loadgroup"


def dist_chosen_by_user(config: pytest.Config) -> bool:
    """Whether the user named a scheduling: xdist turns ``-n N`` alone into ``dist = "load"`` in
    ``config.option``, while the arguments as first parsed (command line and addopts) still hold its default."""
    known = config.known_args_namespace
    return getattr(known, "dist", "no") != "no" or bool(getattr(known, "distload", False))


def group_by_model(config: pytest.Config) -> bool:
    """On the xdist controller of a run with tfcheck models, ``-n N`` without ``--dist`` becomes ``--dist
    loadgroup`` (the workers receive the controller's options); True when it did."""
    if hasattr(config, "workerinput") or getattr(config.option, "dist", "no") != "load":
        return False
    if dist_chosen_by_user(config):
        return False
    config.option.dist = "loadgroup"
    config.pluginmanager.register(TellWorkers(), "tfcheck-loadgroup")
    return True


class TellWorkers:
    """A worker parses the command line again (``-n N`` alone: no loadgroup) and names an item's group in its id,
    which the controller's loadgroup scheduler groups by, only under loadgroup: the controller says so."""

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node) -> None:
        node.workerinput[GROUPED] = True


def follow_controller(config: pytest.Config) -> None:
    """On a worker of a controller that chose loadgroup, do as ``--dist loadgroup`` does on a worker."""
    if getattr(config, "workerinput", {}).get(GROUPED):
        config.option.loadgroup = True


def worker_share(config: pytest.Config) -> int | None:
    """The threads one worker's checks may use, or None outside a worker of two or more or where the user chose."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None or any(os.environ.get(name) for name in THREAD_VARIABLES):
        return None
    workers = int(workerinput.get("workercount", 1))
    if workers < 2:
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // workers)


@contextlib.contextmanager
def thread_share(config: pytest.Config) -> Iterator[None]:
    """Run the body with the worker's share of torch's intra-op threads (never more than it had), then restore."""
    share = worker_share(config)
    if share is None:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(min(before, share))
    try:
        yield
    finally:
        torch.set_num_threads(before)
