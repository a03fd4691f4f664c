"""The size guard's meta build imports neither torch._dynamo nor sympy (about 1.5 s of every start-up): torch's
Python meta kernels ask them only what plain values answer (tfcheck/model/build/deferred_torch.py). Counted, not
timed: each test reads what one fresh interpreter found, since this one has long imported both."""
from __future__ import annotations

import pytest

from fresh_interpreter import found_by

# Run in a fresh interpreter: the guard as tfcheck calls it, then what it left behind, then a constructor that
# uses sympy itself and real dynamo afterwards.
_SCRIPT = r'''
import builtins, gc, json, sys, types
import torch, torch.nn as nn
plain_import = builtins.__import__
from reference_model import TransformerLM
from tfcheck.model.build.construction import refuse_if_too_large
from tfcheck.model.build.sizing import meta_parameter_bytes

out = {"before": [m for m in ("torch._dynamo", "sympy") if m in sys.modules]}
out["refused"] = refuse_if_too_large(TransformerLM, dict, "reference_model:TransformerLM")
out["counted"] = list(meta_parameter_bytes(lambda: TransformerLM()))
real = TransformerLM()
tensors = {id(t): t for t in [*real.parameters(), *real.buffers()]}.values()
out["real"] = [sum(p.numel() for p in real.parameters()), sum(t.numel() * t.element_size() for t in tensors), False]
out["imported"] = [m for m in ("torch._dynamo", "torch.fx.experimental.symbolic_shapes", "sympy")
                   if m in sys.modules]
out["left"] = {"import hook": builtins.__import__ is not plain_import, "torch._dynamo": "_dynamo" in vars(torch),
               "cached no-op disables": sum(1 for f in gc.get_objects() if isinstance(f, types.FunctionType)
                                            and f.__dict__.get("__dynamo_disable") is f)}

class UsesSympy(nn.Module):
    def __init__(self):
        super().__init__()
        import sympy
        n = sympy.Symbol("n")
        assert isinstance(n, sympy.Basic)  # the model's own sympy is the real one
        self.proj = nn.Linear(int(sympy.Integer(6)), 3)

out["sympy model"] = list(meta_parameter_bytes(UsesSympy))
import torch._dynamo
out["dynamo after"] = hasattr(torch._dynamo, "config") and sys.modules["torch._dynamo"] is torch._dynamo
out["meta op after"] = list((torch.zeros(2, 3, device="meta") * 2).shape)
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def found() -> dict:
    return found_by(_SCRIPT)


def test_the_size_guard_imports_neither_dynamo_nor_sympy_for_the_reference_lm(found):
    assert found["before"] == []  # import torch alone imports neither
    assert found["refused"] is None  # counted on meta, fits
    assert found["imported"] == []


def test_the_guard_counts_what_the_real_build_allocates(found):
    assert found["counted"] == found["real"]


def test_the_guard_leaves_no_stand_in_behind(found):
    assert found["left"] == {"import hook": False, "torch._dynamo": False, "cached no-op disables": 0}


def test_a_constructors_own_sympy_and_dynamo_afterwards_are_the_real_modules(found):
    assert found["sympy model"] == [21, 84, False]
    assert found["dynamo after"] is True
    assert found["meta op after"] == [2, 3]
