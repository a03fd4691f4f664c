"""A model's state and torch's process state, taken before and after tfcheck runs on it: the reliability and
fuzz tests assert that tfcheck leaves both exactly as they were."""
from __future__ import annotations

import os
import random
import signal
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.modules.module as module_globals
from torch.overrides import _get_current_function_mode_stack
from torch.utils._python_dispatch import _get_current_dispatch_mode

from tfcheck.recording.tensor_storage import same_values, storage_address

CUDA = torch.cuda.is_available()

HOOK_DICTS = ("_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_pre_hooks",
              "_forward_pre_hooks_with_kwargs", "_backward_hooks", "_backward_pre_hooks", "_state_dict_hooks",
              "_state_dict_pre_hooks", "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks")
TENSOR_HOOKS = ("_backward_hooks", "_post_accumulate_grad_hooks")


def snapshot(model: nn.Module) -> dict:
    return {
        "state": {k: v.clone() for k, v in model.state_dict(keep_vars=False).items()},
        "tensors": [(id(t), t.device, storage_address(t)) for t in [*model.parameters(), *model.buffers()]],
        "grads": [None if p.grad is None else p.grad.clone() for p in model.parameters()],
        "modes": [m.training for m in model.modules()],
        "requires_grad": [p.requires_grad for p in model.parameters()],
        "tree": [(kind, name, id(obj)) for kind, named in (("module", model.named_modules()),
                                                            ("parameter", model.named_parameters()),
                                                            ("buffer", model.named_buffers())) for name, obj in named],
        "attributes": [(path, k, id(v)) for path, m in model.named_modules() for k, v in vars(m).items()
                       if isinstance(v, torch.Tensor)],
        "hooks": [(path, d, list(getattr(m, d, {}) or {})) for path, m in model.named_modules() for d in HOOK_DICTS]
        + [(name, a, list(getattr(p, a, None) or {})) for name, p in model.named_parameters() for a in TENSOR_HOOKS]
        + [(name, list(getattr(module_globals, name))) for name in dir(module_globals)
           if name.startswith("_global_") and "hooks" in name],
        "process": (torch.get_default_dtype(), torch.is_grad_enabled(), torch.is_anomaly_enabled(),
                    len(_get_current_function_mode_stack()), _get_current_dispatch_mode(),
                    torch._C._len_torch_dispatch_stack(), torch.get_num_threads(), signal.getsignal(signal.SIGINT),
                    torch.backends.cudnn.benchmark, torch.backends.mkldnn.enabled,
                    torch.get_float32_matmul_precision(), torch.are_deterministic_algorithms_enabled(),
                    torch.get_default_device(), list(warnings.filters), os.getcwd(), list(sys.path)),
        "rng": (torch.get_rng_state().clone(), random.getstate(), np.random.get_state()[1].copy()),
        "cuda_rng": torch.cuda.get_rng_state_all() if CUDA and torch.cuda.is_initialized() else None,
    }


def assert_same(before: dict, after: dict, where: str = "") -> None:
    assert before["state"].keys() == after["state"].keys()
    assert all(same_values(before["state"][k], after["state"][k]) for k in before["state"]), where
    assert before["tensors"] == after["tensors"], where  # the same tensors, on the same devices, same storage
    assert all((a is None and b is None) or (a is not None and b is not None and torch.equal(a, b))
               for a, b in zip(before["grads"], after["grads"])), where
    for key in ("tree", "attributes", "modes", "requires_grad", "hooks", "process"):
        assert before[key] == after[key], f"{key} {where}"
    assert torch.equal(before["rng"][0], after["rng"][0]) and before["rng"][1] == after["rng"][1], where
    assert np.array_equal(before["rng"][2], after["rng"][2]), where
    if before["cuda_rng"] is not None:
        assert all(torch.equal(a, b) for a, b in zip(before["cuda_rng"], after["cuda_rng"])), where
