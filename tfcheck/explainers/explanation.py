"""The forward-error explainer: an exception from the model becomes a finding that names the innermost
module running, the shapes it received, the user's source line and the troubleshooting row.

Two ways in: ``explain(exc, stack, what)`` for an exception raised while ``tracking(model)`` watched the
module stack (the engine, ``tfcheck.watch``), and ``explain_error(exc_or_text)`` (public as
``tfcheck.explain``) for an exception or a message a user already has. Each known message has a
diagnoser below that reads what it can from the text alone, and more when the module stack is known.
"""
from __future__ import annotations

import contextlib
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
import torch.nn as nn

from tfcheck.report import table
from tfcheck.errors import UsageError
from tfcheck.probe.frames import innermost_user_frame, short_path
from tfcheck.report.findings import Location, _jsonable

#: The row of an exception no diagnoser and no table pattern recognises.
GENERIC_ROW = "forward-fails"
#: Config names of the longest sequence a model was built for (the same names tfcheck.model.subject reads).
MAX_LEN_NAMES = ("max_len", "max_position_embeddings", "n_positions", "block_size", "max_seq_len",
                 "max_seq_length", "context_length", "n_ctx", "max_length", "seq_len")
#: Config ints that are counts, lengths or ids, never a layer width: not offered as the width that disagrees.
_NOT_A_WIDTH = re.compile(r"len|vocab|layer|head|ctx|position|block|batch|pad|_id$|idx|token|seq|drop|eps|"
                          r"bos|eos|seed|step|expert", re.IGNORECASE)
_HEAD_NAMES = ("num_heads", "n_head", "n_heads", "nhead", "num_attention_heads", "heads")


@dataclass
class ModuleStack:
    """Module calls in flight: pushed by a forward pre-hook, popped by a forward hook. After an exception
    the entries still on the stack are the modules that were running when it was raised.

    ``values`` holds, beside each entry, the tensors it was called with (read by the diagnosers for the
    largest token id or the attention shape; empty for stacks built by hand); ``model`` is the root."""

    entries: list[tuple[str, nn.Module, list]] = field(default_factory=list)
    values: list[tuple] = field(default_factory=list)
    model: nn.Module | None = None

    def innermost(self) -> tuple[str, nn.Module, list] | None:
        return self.entries[-1] if self.entries else None

    def innermost_values(self) -> tuple:
        return self.values[-1] if self.values and len(self.values) == len(self.entries) else ()

    def root(self) -> nn.Module | None:
        return self.model if self.model is not None else (self.entries[0][1] if self.entries else None)


@contextlib.contextmanager
def tracking(model: nn.Module) -> Iterator[ModuleStack]:
    """Track the module stack during calls of ``model``; every hook is removed on exit."""
    stack = ModuleStack(model=model)
    handles = []
    try:
        for name, module in model.named_modules():
            handles.append(module.register_forward_pre_hook(_push(stack, name), with_kwargs=True))
            handles.append(module.register_forward_hook(_pop(stack)))
        yield stack
    finally:
        for h in handles:
            h.remove()


def _push(stack: ModuleStack, name: str):
    def hook(module, args, kwargs):
        if name == "" and module is stack.model:
            # A new call of the root: entries left by an earlier call that raised (and was caught) are stale.
            stack.entries.clear()
            stack.values.clear()
        stack.entries.append((name, module, [shape_of(a) for a in args] + [
            f"{k}={shape_of(v)}" for k, v in kwargs.items() if isinstance(v, torch.Tensor)]))
        stack.values.append(tuple(args) + tuple(v for v in kwargs.values() if isinstance(v, torch.Tensor)))
    return hook


def _pop(stack: ModuleStack):
    def hook(module, args, output):
        if stack.entries:
            stack.entries.pop()
        if stack.values:
            stack.values.pop()
    return hook


def shape_of(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        if value.is_nested:  # nn.TransformerEncoder's padded fast path: a nested tensor has no sizes
            return f"nested tensor of {value.size(0)} {str(value.dtype).replace('torch.', '')}"
        return f"{tuple(value.shape)} {str(value.dtype).replace('torch.', '')}"
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(shape_of(v) for v in value) + ")"
    return type(value).__name__


# ----- the explanation ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Explanation:
    """What an error means: a message naming the culprit, where it was raised, the troubleshooting row
    (``row``; ``also`` holds other rows that may explain it), what to look at, and the evidence.

    ``matched`` is False when no row recognised the error; ``row`` is then the generic row."""

    message: str
    location: Location
    row: str
    evidence: dict
    also: tuple[str, ...] = ()
    look_at: tuple[str, ...] = ()
    matched: bool = True

    @property
    def rows(self) -> list[str]:
        """The ids of the rows that match, the likeliest first; empty when none matched."""
        return [self.row, *self.also] if self.matched else []

    def to_dict(self) -> dict:
        return {"message": self.message, "location": self.location.to_dict(), "row": self.row,
                "rows": self.rows, "matched": self.matched, "look_at": list(self.look_at),
                "evidence": _jsonable(self.evidence)}

    def __rich__(self):
        from rich.text import Text
        from rich.tree import Tree

        from tfcheck.ui.render import row_view

        node = Tree(Text(self.message, style="bold"))
        if not self.matched:
            node.add(Text("no troubleshooting row matches this error (`tfcheck table` lists the known ones)"))
        if self.location.module is not None or self.location.file:
            node.add(Text(f"where: {self.location}"))
        for item in self.look_at:
            node.add(Text(f"look at: {item}"))
        node.add(row_view(table.row(self.row)))
        for row_id in self.also:
            # Only the headline: the likeliest row is shown in full, the others are where to read on.
            node.add(Text.assemble(("see also ", "dim"), (f"[{row_id}] ", "bold"), table.row(row_id).symptom))
        return node

    def __str__(self) -> str:
        from tfcheck.ui.render import to_string

        return to_string(self, width=100).rstrip("\n")


@dataclass
class _Scene:
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
class _Diagnosis:
    row: str
    detail: str = ""
    also: tuple[str, ...] = ()
    look_at: tuple[str, ...] = ()
    evidence: dict = field(default_factory=dict)


def explain(exc: BaseException, stack: ModuleStack, what: str, budget: int | None = None) -> Explanation:
    """Describe an exception raised by the model during ``what`` (e.g. 'a forward at batch 3, length 7')."""
    inner = stack.innermost()
    scene = _Scene(str(exc), stack=stack, model=stack.root(), budget=budget)
    if inner is not None:
        scene.name, scene.module, scene.shapes = inner
        scene.values = stack.innermost_values()
    head = f"the model raised during {what}: " if inner is not None else f"raised during {what}: "
    return _explanation(exc, scene, head)


def explain_error(error: BaseException | str, budget: int | str | None = None) -> Explanation:
    """Explain an exception or an error message you already have: the troubleshooting rows it matches,
    what the message says (the sizes, devices, dtypes in it) and what to look at. Public as
    ``tfcheck.explain``. An exception re-raised by ``tfcheck.watch`` gives its full explanation back, with
    the module that raised it. ``budget`` (bytes, or text such as "8GiB") sizes the out-of-memory advice."""
    if isinstance(error, BaseException):
        known = getattr(error, "__tfcheck_explanation__", None)
        if isinstance(known, Explanation) and budget is None:
            return known
        return _explanation(error, _Scene(str(error), budget=parse_bytes(budget)), "")
    if isinstance(error, str):
        return _explanation(None, _Scene(error, budget=parse_bytes(budget)), "")
    raise UsageError(f"tfcheck.explain takes an exception or an error message (str), not {type(error).__name__}")


def _explanation(exc: BaseException | None, scene: _Scene, head: str) -> Explanation:
    first = (_first_line(scene.text) if exc is not None else _headline(scene.text)).rstrip(".!")
    text = f"{type(exc).__name__}: {first}" if exc is not None else first
    evidence: dict = {"exception": text}
    if head:
        evidence["during"] = head.split("raised during ", 1)[-1].removesuffix(": ")
    where = ""
    if scene.known:
        evidence["module_class"] = type(scene.module).__name__
        evidence["module_inputs"] = scene.shapes
        where = (f" in '{scene.name or '<root>'}' ({type(scene.module).__name__}) which received "
                 f"{', '.join(scene.shapes) or 'no tensors'}")
    diagnosis = _diagnose(scene)
    matched = diagnosis is not None
    if diagnosis is None:
        diagnosis = _Diagnosis(GENERIC_ROW, look_at=_generic_look_at(scene))
    evidence.update(diagnosis.evidence)
    detail = f": {diagnosis.detail}" if diagnosis.detail else ""
    message = f"{head}{text}{where}{detail}".rstrip(".") + "."
    file, line = user_frame(exc) if exc is not None else (None, None)
    location = Location(scene.name if scene.known else None, file, line)
    return Explanation(message, location, diagnosis.row, evidence, diagnosis.also, diagnosis.look_at, matched)


def _first_line(text: str) -> str:
    text = text.strip()
    return text.splitlines()[0] if text else ""


def _headline(text: str) -> str:
    """The line that names the error: in a pasted traceback the last 'SomeError: ...' line, else the first."""
    lines = [line.strip() for line in text.strip().splitlines()]
    named = [line for line in lines if re.match(r"[\w.]+(Error|Exception)\b", line)]
    return named[-1] if named else (lines[0] if lines else "")


def _generic_look_at(scene: _Scene) -> tuple[str, ...]:
    if scene.known:
        return (f"the forward of '{scene.name or '<root>'}' ({type(scene.module).__name__}) and the shapes it "
                "received",)
    return ("the innermost frame of the traceback that is in your own code",
            "run the failing code inside `with tfcheck.watch(model):` to learn which module raised and what "
            "it received")


def _diagnose(scene: _Scene) -> _Diagnosis | None:
    for pattern, diagnoser in _DIAGNOSERS:
        found = re.search(pattern, scene.text)
        if found:
            return diagnoser(found, scene)
    matched = table.match_error(scene.text)
    return _Diagnosis(matched.id) if matched else None


# ----- facts about the model ---------------------------------------------------------------------------

def config_ints(model: nn.Module | None) -> dict[str, int]:
    """Integer hyper-parameters of a model: the fields of ``model.config`` (a dataclass, a dict, an object)
    and the model's own int attributes, as ``{'config.d_ff': 64, 'd_model': 32}``."""
    if model is None:
        return {}
    found: dict[str, int] = {}
    config = getattr(model, "config", None)
    if config is not None:
        fields = config if isinstance(config, dict) else _public_attrs(config)
        for key, value in fields.items():
            if isinstance(value, int) and not isinstance(value, bool):
                found[f"config.{key}"] = value
    for key, value in _public_attrs(model).items():
        if isinstance(value, int) and not isinstance(value, bool):
            found.setdefault(key, value)
    return found


def _public_attrs(obj: Any) -> dict[str, Any]:
    if hasattr(obj, "to_dict") and callable(obj.to_dict):  # Hugging Face configs
        with contextlib.suppress(Exception):
            return dict(obj.to_dict())
    try:
        attrs = dict(vars(obj))
    except TypeError:
        return {}
    return {k.lstrip("_"): v for k, v in attrs.items() if not k.startswith("__")}


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def width_names(model: nn.Module | None, value: int) -> list[str]:
    """The hyper-parameters that are a layer width equal to ``value`` (d_ff=64, d_model=32, ...)."""
    return [f"{n}={v}" for n, v in config_ints(model).items() if v == value and v > 1 and not _NOT_A_WIDTH.search(_short(n))]


def max_len_values(*objects: Any) -> dict[str, int]:
    """The max_len / block_size-like ints of models, modules or configs."""
    found: dict[str, int] = {}
    for obj in objects:
        if obj is None:
            continue
        ints = config_ints(obj) if isinstance(obj, nn.Module) else {
            k: v for k, v in _public_attrs(obj).items() if isinstance(v, int)}
        for name, value in ints.items():
            if _short(name) in MAX_LEN_NAMES and not isinstance(value, bool):
                found[name] = value
    return found


def _tensors(values: tuple) -> list[torch.Tensor]:
    return [v for v in values if isinstance(v, torch.Tensor)]


def _names(module: nn.Module | None, path: str | None) -> str:
    return f"'{path or '<root>'}' ({type(module).__name__})"


# ----- the diagnosers: one per known message -----------------------------------------------------------

def _mat1_mat2(found: re.Match, scene: _Scene) -> _Diagnosis:
    rows, got, expected, out = (int(g) for g in found.groups())
    evidence = {"incoming_last_dim": got, "in_features": expected}
    module = scene.module
    if isinstance(module, nn.Linear):
        detail = f"Linear expects in_features={module.in_features}, got last dim {got}"
        blame = _width_blame(scene.model, got, module.in_features)
        if blame:
            detail += f"; {blame}"
            evidence["config"] = blame
        look = (f"the constructor of {_names(module, scene.name)}: nn.Linear({module.in_features}, "
                f"{module.out_features}) is fed {got} features, so it should be nn.Linear({got}, {module.out_features})"
                " — or the layer before it returns the wrong width",)
        return _Diagnosis("mat1-mat2-shapes", detail, look_at=look, evidence=evidence)
    detail = (f"a Linear (or matmul) whose weight expects {expected} input features (in_features={expected}, "
              f"out_features={out}) received a last dimension of {got} ({rows} rows = the batch and length "
              "dimensions flattened)")
    look = (f"the Linear built with in_features={expected}: what feeds it has width {got} "
            "(d_model, d_ff or the head dimension mixed up)",)
    return _Diagnosis("mat1-mat2-shapes", detail, look_at=look, evidence=evidence)


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
    return _short(named.split("=")[0])


def _size_mismatch(found: re.Match, scene: _Scene) -> _Diagnosis:
    a, b, dim = (int(g) for g in found.groups())
    small, big = min(a, b), max(a, b)
    evidence = {"size_a": a, "size_b": b, "dimension": dim}
    detail = (f"two tensors combined elementwise (an add such as a residual, a mask, a positional table) "
              f"have {a} and {b} in dimension {dim}")
    if not scene.known:
        look = ("if one of the sizes is your max_len or block_size, the input is longer than the positional "
                "table or mask was built for (row max-len-exceeded)",
                "if the sizes are d_model and d_ff, a sublayer returns the wrong width to the residual add")
        return _Diagnosis("tensor-size-mismatch", detail, also=("max-len-exceeded",), look_at=look, evidence=evidence)
    local = max_len_values(scene.module)  # a table's own max_len / block_size
    overall = max_len_values(scene.model)
    table_len = {n: v for n, v in {**overall, **local}.items() if v == small}
    if table_len and big > small:
        promised = [f"{n}={v}" for n, v in overall.items() if v >= big]
        names = ", ".join(f"{n}={v}" for n, v in table_len.items())
        evidence["max_len"] = names
        if promised:
            detail += (f": a table or mask in {_names(scene.module, scene.name)} covers {small} positions "
                       f"({names}) but the input has {big}, which {', '.join(promised)} allows — the table was "
                       "built shorter than the model promises")
            look = (f"where {_names(scene.module, scene.name)} is built: build its table from {promised[0].split('=')[0]}",)
            return _Diagnosis("tensor-size-mismatch", detail, look_at=look, evidence=evidence)
        detail += (f": the input has {big} positions but the model was built for {small} ({names}); "
                   f"the table or mask in {_names(scene.module, scene.name)} stops at {small}")
        look = (f"the input length: crop it to the last {small} tokens, or build the model with a larger "
                f"{_bare(next(iter(table_len)))}",)
        return _Diagnosis("max-len-exceeded", detail, look_at=look, evidence=evidence)
    names_a, names_b = width_names(scene.model, a), width_names(scene.model, b)
    if names_a or names_b:
        detail += f" ({a} is {' or '.join(names_a) or 'no config value'}, {b} is {' or '.join(names_b) or 'no config value'})"
    look = (f"the forward of {_names(scene.module, scene.name)}: which of its operands has {a} and which {b} in "
            f"dimension {dim}; every sublayer must return the width it receives",)
    return _Diagnosis("tensor-size-mismatch", detail, look_at=look, evidence=evidence)


def _embedding_index(found: re.Match, scene: _Scene) -> _Diagnosis:
    module = scene.module
    ids = _tensors(scene.values)
    if not isinstance(module, nn.Embedding) or not ids or ids[0].is_floating_point() or ids[0].numel() == 0 \
            or ids[0].device.type == "meta":
        detail = ("an nn.Embedding (or an index_select) received an index outside its table: a token id >= "
                  "vocab_size, a negative id, or a position id >= max_len / block_size")
        look = ("the largest token id against the model's vocab_size (tokenizer and model vocabularies "
                "must agree), and the sequence length against max_len / block_size",)
        return _Diagnosis("embedding-index-out-of-range", detail, also=("max-len-exceeded",), look_at=look)
    tokens = ids[0]
    largest, smallest, length = int(tokens.max()), int(tokens.min()), tokens.shape[-1] if tokens.ndim else 1
    n = module.num_embeddings
    evidence = {"num_embeddings": n, "largest_id": largest, "smallest_id": smallest, "length": length}
    head = f"{_names(module, scene.name)} has num_embeddings={n}"
    if smallest < 0:
        detail = f"{head} but received the negative id {smallest}"
        look = ("the inputs: an ignore_index (-100) or a padding value of -1 was passed as a token id; map it to "
                "pad_id before the embedding",)
        return _Diagnosis("embedding-index-out-of-range", detail, look_at=look, evidence=evidence)
    limits = {k: v for k, v in max_len_values(scene.model).items() if v == n}
    if _looks_positional(scene.name or "", tokens) or limits:
        named = ", ".join(f"{k}={v}" for k, v in limits.items()) or f"num_embeddings={n}"
        detail = (f"{head} ({named}) but received position ids up to {largest}: the input has length {length} and "
                  f"the model was built for at most {n} positions")
        look = (f"the input length: crop it to the last {n} tokens (x[:, -{n}:]) when generating, or build the model "
                f"with a larger {_bare(named)}",)
        return _Diagnosis("max-len-exceeded", detail, look_at=look, evidence=evidence)
    vocab = ", ".join(f"{k}={v}" for k, v in config_ints(scene.model).items() if v == n and "vocab" in k)
    detail = f"{head}{f' ({vocab})' if vocab else ''} but received the token id {largest}; ids must be below {n}"
    look = ("the tokenizer's vocabulary against the model's vocab_size (special tokens added after the model "
            "was built?), and that labels or other ids were not passed as tokens",)
    return _Diagnosis("embedding-index-out-of-range", detail, look_at=look, evidence=evidence)


def _looks_positional(name: str, ids: torch.Tensor) -> bool:
    if re.search(r"pos|wpe|position", name, re.IGNORECASE):
        return True
    row = ids.reshape(-1, ids.shape[-1])[0] if ids.ndim else ids.reshape(1)
    return row.numel() > 1 and bool((row.diff() == 1).all())


def _max_len_text(found: re.Match, scene: _Scene) -> _Diagnosis:
    numbers = [int(n) for n in re.findall(r"\d+", found.group(0))]
    detail = "the input is longer than the longest sequence the model was built for"
    if len(numbers) >= 2:
        detail += f" (length {numbers[0]}, limit {numbers[-1]})"
    look = ("crop the input to the model's max_len / block_size (the last block_size tokens when generating), "
            "or build the model with a larger max_len",)
    return _Diagnosis("max-len-exceeded", detail, look_at=look)


def _half_overflow(found: re.Match, scene: _Scene) -> _Diagnosis:
    dtype = found.group(1)
    limit = {"Half": "65504", "BFloat16": "3.4e38"}.get(dtype, "its largest value")
    detail = (f"a constant written into a {dtype} tensor does not fit (the largest {dtype} magnitude is {limit}); "
              "typically masked_fill(mask, -1e9) once the scores are float16 (autocast or model.half())")
    where = f" in the forward of {_names(scene.module, scene.name)}" if scene.known else ""
    look = (f"the mask fill{where}: use torch.finfo(scores.dtype).min, which fits every dtype, instead of -1e9",)
    return _Diagnosis("half-overflow", detail, look_at=look, evidence={"dtype": dtype})


def _device_mismatch(found: re.Match, scene: _Scene) -> _Diagnosis:
    devices = _mentioned(scene.text, r"\b(cuda(?::\d+)?|cpu|meta|mps|xpu)\b")
    detail = f"tensors on {' and '.join(devices) or 'different devices'} meet in one operation"
    evidence = {"devices": devices}
    if scene.known:
        params = sorted({str(p.device) for p in scene.module.parameters(recurse=False)})
        inputs = sorted({str(t.device) for t in _tensors(scene.values)})
        detail += f"; {_names(scene.module, scene.name)} has parameters on {', '.join(params) or 'none'} and received inputs on {', '.join(inputs) or 'none'}"
        evidence.update(parameter_devices=params, input_devices=inputs)
    look = ("tensors created inside forward without device=x.device (torch.zeros, torch.arange, torch.ones)",
            "tensors kept as plain attributes instead of register_buffer, which model.to(device) does not move",
            "the batch: move it with .to(device) where the model lives")
    return _Diagnosis("device-mismatch", detail, look_at=look, evidence=evidence)


def _dtype_mismatch(found: re.Match, scene: _Scene) -> _Diagnosis:
    dtypes = _mentioned(scene.text, r"\b(Half|Float|Double|BFloat16|Long|Int|Bool|float16|float32|float64|bfloat16|"
                                    r"c10::Half|c10::BFloat16|float|double)\b")
    detail = f"tensors of dtypes {' and '.join(dtypes) or 'that differ'} meet in one operation"
    evidence = {"dtypes": dtypes}
    if scene.known:
        params = sorted({str(p.dtype).replace("torch.", "") for p in scene.module.parameters(recurse=False)})
        inputs = sorted({str(t.dtype).replace("torch.", "") for t in _tensors(scene.values)})
        detail += f"; {_names(scene.module, scene.name)} has {', '.join(params) or 'no'} parameters and received {', '.join(inputs) or 'no'} inputs"
        evidence.update(parameter_dtypes=params, input_dtypes=inputs)
    look = ("model.half() / .to(dtype) applied to the model but not to a tensor made in forward (or the reverse)",
            "run the whole step under torch.autocast instead of casting by hand, or cast with .to(weight.dtype)")
    return _Diagnosis("dtype-mismatch", detail, look_at=look, evidence=evidence)


def _mentioned(text: str, pattern: str) -> list[str]:
    seen: list[str] = []
    for m in re.finditer(pattern, text):
        word = m.group(1).removeprefix("c10::")
        if word not in seen:
            seen.append(word)
    return seen


def _out_of_memory(found: re.Match, scene: _Scene) -> _Diagnosis:
    requested = _bytes_in(scene.text, r"Tried to allocate ([\d.]+ ?[KMGT]?i?B)") or _bytes_in(
        scene.text, r"tried to allocate (\d+) bytes")
    free = _bytes_in(scene.text, r"of which ([\d.]+ ?[KMGT]?i?B) is free")
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
        parts.append(f"the attention scores of {_names(module, path)} alone take b·h·s²·bytes = "
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
    return _Diagnosis("out-of-memory", detail, look_at=tuple(look), evidence=evidence)


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
        heads = next((getattr(module, n) for n in _HEAD_NAMES if isinstance(getattr(module, n, None), int)), None)
        values = _tensors(stack.values[i]) if len(stack.values) == len(stack.entries) else []
        if heads is None or not values or values[0].ndim != 3:
            continue
        batch_first = getattr(module, "batch_first", True) if isinstance(module, nn.MultiheadAttention) else True
        q = values[0]
        k = values[1] if len(values) > 1 and values[1].ndim == 3 else q
        seq_axis = 1 if batch_first else 0
        return (path, module, q.shape[1 - seq_axis], heads, q.shape[seq_axis], k.shape[seq_axis],
                q.element_size())
    return None


_UNITS = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def parse_bytes(value: int | str | None) -> int | None:
    """Bytes from an int or a text such as '8GiB', '512 MB', '1.5GB'; None stays None."""
    if value is None or isinstance(value, int):
        return value
    found = re.fullmatch(r"\s*([\d.]+)\s*([KMGT]?I?B)?\s*", str(value).upper())
    if not found:
        raise UsageError(f"cannot read the memory budget {value!r}; give bytes or a size such as 8GiB or 512MB")
    return int(float(found.group(1)) * _UNITS[found.group(2) or "B"])


def _bytes_in(text: str, pattern: str) -> int | None:
    found = re.search(pattern, text)
    return parse_bytes(found.group(1).replace(" ", "")) if found else None


def format_bytes(n: int) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


#: Message pattern -> diagnoser, tried in order; messages none of them knows fall back to the table patterns.
#: "index out of range in self" is recognised here rather than in table.toml: it is too generic a message
#: for the table's plain patterns (tests/test_table.py keeps it unmatched there).
_DIAGNOSERS: tuple[tuple[str, Callable[[re.Match, _Scene], _Diagnosis]], ...] = (
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


# ----- where in the user's code ------------------------------------------------------------------------

def user_frame(exc: BaseException) -> tuple[str | None, int | None]:
    """The innermost traceback frame in the user's code: not torch, not tfcheck, not the standard library."""
    frame = innermost_user_frame(exc)
    return (short_path(frame.filename), frame.lineno) if frame is not None else (None, None)
