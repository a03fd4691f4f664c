"""The package layout: every check is found in its family's folder, and the public paths written before the
layered layout (in users' code, docs and every printed replay line) still import."""
import importlib
import re
from pathlib import Path

import pytest

from tfcheck.battery import all_checks

BATTERY = {
    "shape": {"forward.smoke", "shape.contract", "shape.residual"},
    "mask": {"mask.causal", "mask.padding"},
    "flow": {"batch.independence", "position.sensitivity", "cross.dependence"},
    "attention": {"attention.heads", "decode.cache"},
    "numerics": {"attention.scale", "attention.softmax_axis", "embedding.scale", "numerics.half",
                 "numerics.exp_overflow", "numerics.nan_source"},
    "training": {"dropout.eval", "embedding.padding", "lr.warmup", "norm.placement", "train.grad_flow",
                 "train.loss_at_init", "train.overfit_batch", "train.target_leak"},
}


def test_the_registry_holds_exactly_the_battery_each_check_in_its_family_folder():
    found = {c.id: c.func.__module__ for c in all_checks()}
    assert set(found) == set().union(*BATTERY.values())
    assert len(found) == 24
    for family, ids in BATTERY.items():
        for check_id in ids:
            assert found[check_id].startswith(f"tfcheck.checks.{family}."), (check_id, found[check_id])


@pytest.mark.parametrize("path,names", [
    ("tfcheck.strategies", ["padded_batches", "model_inputs", "token_ids", "padding_masks"]),
    ("tfcheck.flow", ["tolerance"]),
    ("tfcheck.recorded_probe", ["observer", "shared"]),
    ("tfcheck.leakmap", ["LeakMap", "save_images"]),
    ("tfcheck.training", ["curve_svg", "schedule_rates", "sparkline"]),
    ("tfcheck.registry", ["check", "all_checks", "get"]),
    ("tfcheck.shrinking", ["replay", "MAX_FORWARDS"]),
    ("tfcheck.report", ["Report", "ModelReport", "CheckResult", "Finding", "Status"]),
    ("tfcheck.plugin", ["pytest_addoption"]),
    ("tfcheck.cli", ["main"]),
])
def test_public_paths_keep_working(path, names):
    module = importlib.import_module(path)
    for name in names:
        assert callable(getattr(module, name)) or getattr(module, name) is not None, (path, name)


def test_the_public_explain_function_is_not_shadowed_by_a_subpackage():
    import tfcheck
    import tfcheck.explainers.explanation  # noqa: F401  (a subpackage named 'explain' would replace the function)

    assert callable(tfcheck.explain) and callable(tfcheck.watch) and callable(tfcheck.trace_shapes)


def test_no_module_is_over_400_lines():
    # One idea per module: a module that grows past this is doing two things (the god modules were 600-800).
    from pathlib import Path

    import tfcheck

    root = Path(tfcheck.__file__).parent
    long = {str(p.relative_to(root)): n for p in root.rglob("*.py") if (n := len(p.read_text().splitlines())) > 400}
    assert not long, long


ARCHITECTURE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
PACKAGE = Path(__file__).resolve().parents[2] / "tfcheck"


def documented_modules(text: str) -> set[str]:
    """Module files named in docs/architecture.md: each "- `name.py` — ..." line under its folder's heading
    ("### `tfcheck/<folder>/`", or "### The top level" for the files at the package's top)."""
    found, folder = set(), None
    for line in text.splitlines():
        heading = re.match(r"### (?:`tfcheck/(.+?)/`|(The top level))", line)
        if heading:
            folder = heading.group(1) or ""
        elif line.startswith("## "):
            folder = None
        elif folder is not None:
            for name in re.findall(r"^- `([\w/]+\.py)`", line):
                found.add(f"{folder}/{name}" if folder else name)
    return found


def test_docs_architecture_lists_every_module_and_no_other():
    on_disk = {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")}
    documented = documented_modules(ARCHITECTURE.read_text("utf-8"))
    assert not on_disk - documented, f"modules docs/architecture.md does not list: {sorted(on_disk - documented)}"
    assert not documented - on_disk, f"docs/architecture.md lists modules that do not exist: " \
                                     f"{sorted(documented - on_disk)}"
