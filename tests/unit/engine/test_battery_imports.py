"""The battery on a small model imports neither torch._dynamo nor sympy (about 1 s of every `tfcheck check`): the
recorder's dispatch mode and torch.optim's step ask them only what plain values answer, and the engine runs every
check inside tfcheck.model.build.deferred_torch's window. Counted, not timed: each test reads what one fresh interpreter
found, since this one has long imported both."""
from __future__ import annotations

import pytest

from fresh_interpreter import found_by

_SCRIPT = r'''
import builtins, gc, json, sys, types
import torch
plain_import = builtins.__import__
import tfcheck

report = tfcheck.run_checks("reference_model:TransformerLM")
out = {"statuses": sorted({r.status.value for r in report.models[0].results}),
       "ran": len(report.models[0].results),
       "imported": [m for m in ("torch._dynamo", "torch.fx.experimental.symbolic_shapes", "sympy")
                    if m in sys.modules],
       "left": {"import hook": builtins.__import__ is not plain_import, "torch._dynamo": "_dynamo" in vars(torch),
                "cached no-op disables": sum(1 for f in gc.get_objects() if isinstance(f, types.FunctionType)
                                             and f.__dict__.get("__dynamo_disable") is f)}}
# Once the window is closed the real modules come back wherever torch asks for them.
import torch._dynamo
model = torch.nn.Linear(3, 2)
opt = torch.optim.Adam(model.parameters())
model(torch.ones(1, 3)).sum().backward()
opt.step()
out["dynamo after"] = hasattr(torch._dynamo, "config") and sys.modules["torch._dynamo"] is torch._dynamo
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def found() -> dict:
    return found_by(_SCRIPT)


def test_the_battery_on_the_reference_lm_imports_neither_dynamo_nor_sympy(found):
    assert found["statuses"] == ["pass"] and found["ran"] >= 20  # the whole battery ran, training checks included
    assert found["imported"] == []


def test_the_battery_leaves_no_stand_in_behind(found):
    assert found["left"] == {"import hook": False, "torch._dynamo": False, "cached no-op disables": 0}
    assert found["dynamo after"] is True


_PROGRAM = r'''
import contextlib, gc, io, json, sys
from tfcheck.cli import main

spec = ["check", "--only", "shape.contract", "reference_model:TransformerLM"]
with contextlib.redirect_stdout(io.StringIO()):
    called = main(spec)  # as a function: the collector as it was
out = {"called": [called, gc.isenabled(), gc.get_freeze_count()]}
sys.argv = ["tfcheck", *spec]
with contextlib.redirect_stdout(io.StringIO()) as printed:
    program = main()  # as the program: imports with the collector paused, then frozen
out["program"] = [program, gc.isenabled(), gc.get_freeze_count() > 100_000, printed.getvalue().splitlines()[-1]]
print(json.dumps(out))
'''


def test_the_program_imports_with_the_collector_paused_and_a_call_leaves_it_alone():
    found = found_by(_PROGRAM)
    assert found["called"] == [0, True, 0]
    program, enabled, frozen, verdict = found["program"]
    assert (program, enabled, frozen) == (0, True, True) and verdict.startswith("PASS 1 passed")
