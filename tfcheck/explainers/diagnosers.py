"""The diagnosers: one per known error message. Each reads what it can from the message alone, and more when
the module stack is known (the innermost module, its inputs, the root model), and names the troubleshooting
row, the detail and what to look at."""
from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from tfcheck.explainers.model_facts import (
    HEAD_NAMES,
    config_ints,
    config_key,
    max_len_values,
    names_of,
    tensors_of,
    width_names,
)
from tfcheck.model.build.byte_sizes import bytes_in, format_bytes
from tfcheck.recording.module_stack import ModuleStack
from tfcheck.report import table


@dataclass
class Scene:
    """What a diagnoser may read: the message, and when known the innermost module, its inputs, the root."""

    text: str
    name: str | None = None
    module: nn.Module | None = None
    shapes: list = field(default_factory=list)
    values: tuple = ()
    model: nn.Module | None = None
    stack: ModuleStack | None = None
    budget: int | None = None

    @property
    def known(self) -> bool:
        return self.module is not None


@dataclass
class Diagnosis:
    row: str
    detail: str = ""
    also: tuple[str, ...] = ()
    look_at: tuple[str, ...] = ()
    evidence: dict = field(default_factory=dict)


def diagnose(scene: Scene) -> Diagnosis | None:
    for pattern, diagnoser in DIAGNOSERS:
        found = re.search(pattern, scene.text)
        if found:
            return diagnoser(found, scene)
    matched = table.match_error(scene.text)
    return Diagnosis(matched.id) if matched else None


def _mat1_mat2(found: re.Match, scene: Scene) -> Diagnosis:
    rows, got, expected, out = (int(g) for g in found.groups())
    evidence: dict[str, object] = {"incoming_last_dim": got, "in_features": expected}
    module = scene.module
    if isinstance(module, nn.Linear):
        detail = f"Linear expects in_features={module.in_features}, got last dim {got}"
        blame = _width_blame(scene.model, got, module.in_features)
        if blame:
            detail += f"; {blame}"
            evidence["config"] = blame
        look = (f"the constructor of {names_of(module, scene.name)}: nn.Linear({module.in_features}, "
                f"{module.out_features}) is fed {got} features, so it should be nn.Linear({got}, {module.out_features})"
                " — or the layer before it returns the wrong width",)
        return Diagnosis("mat1-mat2-shapes", detail, look_at=look, evidence=evidence)
    detail = (f"a Linear (or matmul) whose weight expects {expected} input features (in_features={expected}, "
              f"out_features={out}) received a last dimension of {got} ({rows} rows = the batch and length "
              "dimensions flattened)")
    look = (f"the Linear built with in_features={expected}: what feeds it has width {got} "
            "(d_model, d_ff or the head dimension mixed up)",)
    return Diagnosis("mat1-mat2-shapes", detail, look_at=look, evidence=evidence)


def _width_blame(model: nn.Module | None, got: int, expected: int) -> str:
    got_names, expected_names = width_names(model, got), width_names(model, expected)
    parts = []
    if got_names:
        parts.append(f"the incoming {got} is {' or '.join(got_names)}")
    if expected_names:
        parts.append(f"in_features {expected} is {' or '.join(expected_names)}")
    if got_names and expected_names:
        return (" and ".join(parts) + f": the layer was probably built with {_bare(expected_names[0])} where "
                f"{_bare(got_names[0])} was meant")
    return " and ".join(parts)


def _bare(named: str) -> str:
    return config_key(named.split("=")[0])


def _size_mismatch(found: re.Match, scene: Scene) -> Diagnosis:
    a, b, dim = (int(g) for g in found.groups())
    small, big = min(a, b), max(a, b)
    evidence: dict[str, object] = {"size_a": a, "size_b": b, "dimension": dim}
    detail = (f"two tensors combined elementwise (an add such as a residual, a mask, a positional table) "
              f"have {a} and {b} in dimension {dim}")
    look: tuple[str, ...]
    if not scene.known:
        look = ("if one of the sizes is your max_len or block_size, the input is longer than the positional "
                "table or mask was built for (row max-len-exceeded)",
                "if the sizes are d_model and d_ff, a sublayer returns the wrong width to the residual add")
        return Diagnosis("tensor-size-mismatch", detail, also=("max-len-exceeded",), look_at=look, evidence=evidence)
    local = max_len_values(scene.module)  # a table's own max_len / block_size
    overall = max_len_values(scene.model)
    table_len = {n: v for n, v in {**overall, **local}.items() if v == small}
    if table_len and big > small:
        promised = [f"{n}={v}" for n, v in overall.items() if v >= big]
        names = ", ".join(f"{n}={v}" for n, v in table_len.items())
        evidence["max_len"] = names
        if promised:
            detail += (f": a table or mask in {names_of(scene.module, scene.name)} covers {small} positions "
                       f"({names}) but the input has {big}, which {', '.join(promised)} allows — the table was "
                       "built shorter than the model promises")
            look = (f"where {names_of(scene.module, scene.name)} is built: build its table from "
                    f"{promised[0].split('=')[0]}",)
            return Diagnosis("tensor-size-mismatch", detail, look_at=look, evidence=evidence)
        detail += (f": the input has {big} positions but the model was built for {small} ({names}); "
                   f"the table or mask in {names_of(scene.module, scene.name)} stops at {small}")
        look = (f"the input length: crop it to the last {small} tokens, or build the model with a larger "
                f"{_bare(next(iter(table_len)))}",)
        return Diagnosis("max-len-exceeded", detail, look_at=look, evidence=evidence)
    names_a, names_b = width_names(scene.model, a), width_names(scene.model, b)
    if names_a or names_b:
        detail += (f" ({a} is {' or '.join(names_a) or 'no config value'}, "
                   f"{b} is {' or '.join(names_b) or 'no config value'})")
    look = (f"the forward of {names_of(scene.module, scene.name)}: which of its operands has {a} and which {b} in "
            f"dimension {dim}; every sublayer must return the width it receives",)
    return Diagnosis("tensor-size-mismatch", detail, look_at=look, evidence=evidence)


def _embedding_index(found: re.Match, scene: Scene) -> Diagnosis:
    module = scene.module
    ids = tensors_of(scene.values)
    if not isinstance(module, nn.Embedding) or not ids or ids[0].is_floating_point() or ids[0].numel() == 0 \
            or ids[0].device.type == "meta":
        detail = ("an nn.Embedding (or an index_select) received an index outside its table: a token id >= "
                  "vocab_size, a negative id, or a position id >= max_len / block_size")
        look = ("the largest token id against the model's vocab_size (tokenizer and model vocabularies "
                "must agree), and the sequence length against max_len / block_size",)
        return Diagnosis("embedding-index-out-of-range", detail, also=("max-len-exceeded",), look_at=look)
    tokens = ids[0]
    largest, smallest, length = int(tokens.max()), int(tokens.min()), tokens.shape[-1] if tokens.ndim else 1
    n = module.num_embeddings
    evidence = {"num_embeddings": n, "largest_id": largest, "smallest_id": smallest, "length": length}
    head = f"{names_of(module, scene.name)} has num_embeddings={n}"
    if smallest < 0:
        detail = f"{head} but received the negative id {smallest}"
        look = ("the inputs: an ignore_index (-100) or a padding value of -1 was passed as a token id; map it to "
                "pad_id before the embedding",)
        return Diagnosis("embedding-index-out-of-range", detail, look_at=look, evidence=evidence)
    limits = {k: v for k, v in max_len_values(scene.model).items() if v == n}
    if _looks_positional(scene.name or "", tokens) or limits:
        named = ", ".join(f"{k}={v}" for k, v in limits.items()) or f"num_embeddings={n}"
        detail = (f"{head} ({named}) but received position ids up to {largest}: the input has length {length} and "
                  f"the model was built for at most {n} positions")
        look = (f"the input length: crop it to the last {n} tokens (x[:, -{n}:]) when generating, or build the model "
                f"with a larger {_bare(named)}",)
        return Diagnosis("max-len-exceeded", detail, look_at=look, evidence=evidence)
    vocab = ", ".join(f"{k}={v}" for k, v in config_ints(scene.model).items() if v == n and "vocab" in k)
    detail = f"{head}{f' ({vocab})' if vocab else ''} but received the token id {largest}; ids must be below {n}"
    look = ("the tokenizer's vocabulary against the model's vocab_size (special tokens added after the model "
            "was built?), and that labels or other ids were not passed as tokens",)
    return Diagnosis("embedding-index-out-of-range", detail, look_at=look, evidence=evidence)


def _looks_positional(name: str, ids: torch.Tensor) -> bool:
    if re.search(r"pos|wpe|position", name, re.IGNORECASE):
        return True
    row = ids.reshape(-1, ids.shape[-1])[0] if ids.ndim else ids.reshape(1)
    return row.numel() > 1 and bool((row.diff() == 1).all())


def _max_len_text(found: re.Match, scene: Scene) -> Diagnosis:
    numbers = [int(n) for n in re.findall(r"\d+", found.group(0))]
    detail = "the input is longer than the longest sequence the model was built for"
    if len(numbers) >= 2:
        detail += f" (length {numbers[0]}, limit {numbers[-1]})"
    look = ("crop the input to the model's max_len / block_size (the last block_size tokens when generating), "
            "or build the model with a larger max_len",)
    return Diagnosis("max-len-exceeded", detail, look_at=look)


def _half_overflow(found: re.Match, scene: Scene) -> Diagnosis:
    dtype = found.group(1)
    limit = {"Half": "65504", "BFloat16": "3.4e38"}.get(dtype, "its largest value")
    detail = (f"a constant written into a {dtype} tensor does not fit (the largest {dtype} magnitude is {limit}); "
              "typically masked_fill(mask, -1e9) once the scores are float16 (autocast or model.half())")
    where = f" in the forward of {names_of(scene.module, scene.name)}" if scene.known else ""
    look = (f"the mask fill{where}: use torch.finfo(scores.dtype).min, which fits every dtype, instead of -1e9",)
    return Diagnosis("half-overflow", detail, look_at=look, evidence={"dtype": dtype})


def _device_mismatch(found: re.Match, scene: Scene) -> Diagnosis:
    devices = _mentioned(scene.text, r"\b(cuda(?::\d+)?|cpu|meta|mps|xpu)\b")
    detail = f"tensors on {' and '.join(devices) or 'different devices'} meet in one operation"
    evidence = {"devices": devices}
    if scene.module is not None:  # scene.known
        params = sorted({str(p.device) for p in scene.module.parameters(recurse=False)})
        inputs = sorted({str(t.device) for t in tensors_of(scene.values)})
        detail += (f"; {names_of(scene.module, scene.name)} has parameters on {', '.join(params) or 'none'} "
                   f"and received inputs on {', '.join(inputs) or 'none'}")
        evidence.update(parameter_devices=params, input_devices=inputs)
    look = ("tensors created inside forward without device=x.device (torch.zeros, torch.arange, torch.ones)",
            "tensors kept as plain attributes instead of register_buffer, which model.to(device) does not move",
            "the batch: move it with .to(device) where the model lives")
    return Diagnosis("device-mismatch", detail, look_at=look, evidence=evidence)


def _dtype_mismatch(found: re.Match, scene: Scene) -> Diagnosis:
    dtypes = _mentioned(scene.text, r"\b(Half|Float|Double|BFloat16|Long|Int|Bool|float16|float32|float64|bfloat16|"
                                    r"c10::Half|c10::BFloat16|float|double)\b")
    detail = f"tensors of dtypes {' and '.join(dtypes) or 'that differ'} meet in one operation"
    evidence = {"dtypes": dtypes}
    if scene.module is not None:  # scene.known
        params = sorted({str(p.dtype).replace("torch.", "") for p in scene.module.parameters(recurse=False)})
        inputs = sorted({str(t.dtype).replace("torch.", "") for t in tensors_of(scene.values)})
        detail += (f"; {names_of(scene.module, scene.name)} has {', '.join(params) or 'no'} parameters "
                   f"and received {', '.join(inputs) or 'no'} inputs")
        evidence.update(parameter_dtypes=params, input_dtypes=inputs)
    look = ("model.half() / .to(dtype) applied to the model but not to a tensor made in forward (or the reverse)",
            "run the whole step under torch.autocast instead of casting by hand, or cast with .to(weight.dtype)")
    return Diagnosis("dtype-mismatch", detail, look_at=look, evidence=evidence)


def _mentioned(text: str, pattern: str) -> list[str]:
    seen: list[str] = []
    for m in re.finditer(pattern, text):
        word = m.group(1).removeprefix("c10::")
        if word not in seen:
            seen.append(word)
    return seen


def _out_of_memory(found: re.Match, scene: Scene) -> Diagnosis:
    requested = bytes_in(scene.text, r"Tried to allocate ([\d.]+ ?[KMGT]?i?B)") or bytes_in(
        scene.text, r"tried to allocate (\d+) bytes")
    free = bytes_in(scene.text, r"of which ([\d.]+ ?[KMGT]?i?B) is free")
    budget = scene.budget or free
    evidence: dict = {k: v for k, v in (("requested_bytes", requested), ("free_bytes", free),
                                        ("budget_bytes", budget)) if v is not None}
    parts = []
    if requested:
        parts.append(f"one allocation of {format_bytes(requested)} failed"
                     + (f" with {format_bytes(free)} free" if free else ""))
    attention = _attention_in_stack(scene.stack)
    look: list[str] = []
    if attention is not None:
        path, module, b, h, s_q, s_k, itemsize = attention
        scores = b * h * s_q * s_k * itemsize
        evidence.update(batch=b, heads=h, length=s_q, key_length=s_k, scores_bytes=scores)
        parts.append(f"the attention scores of {names_of(module, path)} alone take b·h·s²·bytes = "
                     f"{b}·{h}·{s_q}·{s_k}·{itemsize} = {format_bytes(scores)} per copy (softmax and dropout keep "
                     "more copies)")
        if budget:
            look.append(_what_fits(budget, b, h, s_q, s_k, itemsize, evidence))
        else:
            look.append("give the memory you have (tfcheck.explain(exc, budget='8GiB'), watch(model, budget=...), "
                        "tfcheck explain --budget) for the batch and length that fit")
        look.append("memory-efficient attention (torch.nn.functional.scaled_dot_product_attention) never "
                    "materialises the s×s scores")
    elif requested and budget and requested > budget:
        ratio = requested / budget
        look.append(f"the allocation must shrink {ratio:.1f}×: divide the batch by {math.ceil(ratio)}, or — if it is "
                    f"the attention scores, which grow with the square of the length — the length by "
                    f"{math.ceil(math.sqrt(ratio))}")
    look.append("a smaller batch with gradient accumulation, activation checkpointing, or mixed precision")
    detail = "; ".join(parts) if parts else "the device ran out of memory"
    return Diagnosis("out-of-memory", detail, look_at=tuple(look), evidence=evidence)


def _what_fits(budget: int, b: int, h: int, s_q: int, s_k: int, itemsize: int, evidence: dict) -> str:
    """The batch at this length, and the (self-attention) length at this batch, whose scores fit ``budget``."""
    fit_b = budget // max(1, h * s_q * s_k * itemsize)
    at_batch = max(1, min(b, fit_b))  # batch 0 fits nothing: then the length that fits at batch 1
    fit_s = math.isqrt(budget // max(1, at_batch * h * itemsize))
    evidence.update(batch_that_fits=fit_b, length_that_fits=fit_s)
    if fit_b >= 1:
        return (f"to keep one copy of the scores within {format_bytes(budget)}: batch ≤ {fit_b} at length {s_q}, "
                f"or length ≤ {fit_s} at batch {at_batch}")
    return (f"even batch 1 does not fit {format_bytes(budget)} at length {s_q}: length ≤ {fit_s} at batch 1 "
            "keeps one copy of the scores within it")


def _attention_in_stack(stack: ModuleStack | None):
    """The innermost running module with a head count, and the shape it received: (path, module, b, h, s_q,
    s_k, bytes per element); None when no attention module is on the stack."""
    if stack is None:
        return None
    for i in range(len(stack.entries) - 1, -1, -1):
        path, module, _ = stack.entries[i]
        heads = next((getattr(module, n) for n in HEAD_NAMES if isinstance(getattr(module, n, None), int)), None)
        values = tensors_of(stack.values[i]) if len(stack.values) == len(stack.entries) else []
        if heads is None or not values or values[0].ndim != 3:
            continue
        batch_first = getattr(module, "batch_first", True) if isinstance(module, nn.MultiheadAttention) else True
        q = values[0]
        k = values[1] if len(values) > 1 and values[1].ndim == 3 else q
        seq_axis = 1 if batch_first else 0
        return (path, module, q.shape[1 - seq_axis], heads, q.shape[seq_axis], k.shape[seq_axis],
                q.element_size())
    return None


#: Message pattern -> diagnoser, tried in order; messages none of them knows fall back to the table patterns.
#: "index out of range in self" is recognised here rather than in table.toml: it is too generic a message
#: for the table's plain patterns (tests/test_table.py keeps it unmatched there).
DIAGNOSERS: tuple[tuple[str, Callable[[re.Match, Scene], Diagnosis]], ...] = (
    (r"value cannot be converted to type (?:at::|c10::)?(\w+) without overflow", _half_overflow),
    (r"out of memory|can't allocate memory", _out_of_memory),
    (r"Expected all tensors to be on the same device|is not on the expected device|Expected object of device "
     r"type", _device_mismatch),
    (r"must have the same dtype|to have the same dtype|expected scalar type \w+ but found \w+|have same dtypes|"
     r"must have the same scalar type|dtypes match", _dtype_mismatch),
    (r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)", _mat1_mat2),
    (r"The size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\) at non-singleton dimension (\d+)",
     _size_mismatch),
    (r"index out of range in self|srcIndex < srcSelectDimSize", _embedding_index),
    (r"sequence length \d+ exceeds .*?max_len=\d+|Cannot forward sequence of length \d+, block size is only \d+|"
     r"longer than the specified maximum sequence length", _max_len_text),
)
