"""decode.cache: decoding token by token with the model's KV cache must give the outputs of one full
forward over the same tokens.

Applies to models whose forward takes a cache (``past_key_values``, ``past``, ``kv_cache``, ``cache``,
``layer_past``): the protocol is Hugging Face's, ``model(tokens, past_key_values=cache, use_cache=True)``
with the cache taken back from ``.past_key_values`` of the output (or the last element of a returned
tuple). It catches caches that are dropped or overwritten, rotary or positional offsets that restart at
0 for each new token, and ``is_causal=True`` masks (top-left aligned) used with cached keys.
"""
from __future__ import annotations

from typing import Any

import torch

from tfcheck.engine.context import ModelRaised
from tfcheck.engine.registry import NotApplicable, check
from tfcheck.errors import UsageError
from tfcheck.model.facts.structure import forward_params
from tfcheck.model.inputs import PROBE_LENGTH, TARGET_LENGTH_DELTA
from tfcheck.probe.flow import change_per_position, replace_tokens, tolerance
from tfcheck.report.findings import Finding, Location
from tfcheck.report.status import Status

ID = "decode.cache"
ROW = "kv-cache-decode-mismatch"
CACHE_ARGS = ("past_key_values", "past_key_value", "past", "kv_cache", "cache", "layer_past")
#: Decoded length, the standard probe length: a prefill of all but the last DECODE_STEPS tokens, then one token
#: per step.
LENGTH = PROBE_LENGTH
#: One-token steps after the prefill: a constant number of passes whatever the length. The first runs
#: on the prefill's cache (offset bugs), the second on a cache a step appended to (append bugs).
DECODE_STEPS = 2
#: Sample 1 is sample 0 with its first token changed: the positive control (later outputs must move).
BATCH = 2


def _not_applicable(subject) -> NotApplicable | None:
    if not any(n in forward_params(subject.model) for n in CACHE_ARGS):
        return NotApplicable(f"forward takes no cache argument (looked for {', '.join(CACHE_ARGS)})")
    if subject.facts.causal is False:
        return NotApplicable(f"the model is not causal ({_causal_source(subject)}), so decoding one token at a time "
                             "is not meant to match a full forward")
    if subject.facts.inputs is not None:
        return NotApplicable("the model's inputs come from a declared 'inputs' factory, so tfcheck cannot feed it "
                             "one token at a time")
    if subject.probe_length(LENGTH) < 2:
        return NotApplicable("the model takes a single position (max_len)")
    if (subject.facts.length_multiple or 1) > 1:
        return NotApplicable(f"the model takes lengths that are multiples of {subject.facts.length_multiple} only "
                             "(length_multiple), and decoding feeds one token at a time")
    return None


@check(ID, "token-by-token decoding with the KV cache matches a full forward", rows=(ROW,),
       kinds=("decoder", "seq2seq", None), order=70, applies=_not_applicable)
def decode_cache(ctx) -> list[Finding]:
    """One full forward on a batch of 2 at the probe length (7), then a prefill of the first 5 tokens and 2
    forwards of one token each with the cache the model returned; every position's output must equal the full
    forward's, within rounding relative to the output's scale. Sample 1 differs from sample 0 in its first
    token only, so the later outputs must differ (positive control: the past reaches them)."""
    subject = ctx.subject
    params = forward_params(subject.model)
    cache_arg = next(n for n in CACHE_ARGS if n in params)
    length = subject.probe_length(LENGTH)
    source, target = _inputs(subject, length)
    full = ctx.run(*subject.inputs_for(source, target), f"a full forward at batch {BATCH}, length {length}")
    decoded = target if target is not None else source
    reference = full.output.detach()
    if reference.dim() < 2 or reference.shape[:2] != decoded.shape[:2]:
        return [_skip(f"inconclusive: the output {tuple(reference.shape)} is not per position (batch, length, ...)")]
    tol = tolerance(reference)
    control = float(change_per_position(reference[0:1], reference[1:2])[0, 1:].max())
    if control <= tol:
        return [_skip(f"inconclusive: changing the first token did not change the later outputs of the full "
                      f"forward ({control:.3g} <= tolerance {tol:.3g}), so a cache cannot be told from none",
                      {"positive_control_change": control, "tolerance": tol})]
    steps = _decode(ctx, subject, source, target, cache_arg, "use_cache" in params)
    if isinstance(steps, Finding):
        return [steps]
    outputs, suspects = steps
    return [_judge(subject, reference, outputs, suspects, tol, control, cache_arg, length)]


def _skip(message: str, evidence: dict | None = None) -> Finding:
    return Finding(ID, Status.SKIP, message, evidence=evidence or {})


def _causal_source(subject) -> str:
    source = subject.source_of("causal")
    return f"causal=false from {source}" if source else "causal=false"


def _inputs(subject, length: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(source, target): the decoded stream has two samples that differ in their first token only."""
    gen = torch.Generator().manual_seed(7)
    seq2seq = subject.takes_target
    if seq2seq:
        source = subject.random_primary(1, max(2, length - TARGET_LENGTH_DELTA), gen)
        source = source.repeat(BATCH, *[1] * (source.dim() - 1))
    first = subject.random_primary(1, length, gen)
    decoded = first.repeat(BATCH, *[1] * (first.dim() - 1))
    where = torch.zeros(decoded.shape[:2], dtype=torch.bool)
    where[1, 0] = True
    if decoded.is_floating_point():
        noise = torch.randn(decoded.shape, generator=gen).to(decoded.device, decoded.dtype) * float(decoded.std())
        decoded = torch.where(where.to(decoded.device)[..., None], decoded + noise, decoded)
    else:
        decoded = replace_tokens(subject, decoded, where, seed=8)
    return (source, decoded) if seq2seq else (decoded, None)


def _chunks(length: int) -> list[tuple[int, int]]:
    """(start, end) of each decoding step: the prefill, then one token at a time."""
    prefill = max(1, length - DECODE_STEPS)
    return [(0, prefill)] + [(t, t + 1) for t in range(prefill, length)]


def _decode(ctx, subject, source, target, cache_arg: str, use_cache: bool):
    """Prefill, then feed the decoded stream one token at a time, each step with the cache the previous one
    returned: (per-position outputs, ops that look like a cache bug) or a finding when the protocol does not fit."""
    decoded = target if target is not None else source
    chunks = _chunks(decoded.shape[1])
    cache, outputs, suspects = None, [], []
    whole = target is None and _feeds_whole_sequence(subject.model, decoded)
    for t, (start, end) in enumerate(chunks):
        step = decoded[:, 0 if whole else start:end]
        args, kwargs = subject.inputs_for(source, step) if target is not None else subject.inputs_for(step)
        kwargs = {**kwargs, cache_arg: cache}
        if use_cache:
            kwargs["use_cache"] = True
        # each step reads its new tokens per sample (and a seq2seq model its whole source again)
        step_tokens = decoded.shape[0] * (end - start + (source.shape[1] if target is not None else 0))
        what = (f"decoding step {t + 1} of {len(chunks)} ({'a prefill of ' if t == 0 else ''}{end - start} "
                f"token{'s' if end - start > 1 else ''}, {cache_arg}={'the returned cache' if t else 'None'})")
        positions = _RestartedPositions(end - start)
        try:
            raw, recording = _step(ctx, args, kwargs, what, tokens=step_tokens, record=t == 1, on_op=positions)
        except ModelRaised as raised:
            return _raised(raised, t, cache_arg)
        if recording is not None:
            suspects = _top_left_causal(recording) + positions.found
        out = _step_output(subject, raw)
        cache = _returned_cache(raw, cache_arg)
        if out is None or out.dim() < 2 or out.shape[1] < end - start:
            return _skip(f"inconclusive: {what} returned no per-position output tfcheck could read")
        if cache is None:
            return _skip(f"inconclusive: the model returned no cache at {what}: tfcheck looks for .past_key_values "
                         "(or the key) on the output, or the last element of a returned tuple")
        outputs.append(out[:, out.shape[1] - (end - start):].detach())
    return torch.cat(outputs, dim=1), suspects


def _feeds_whole_sequence(model, decoded: torch.Tensor) -> bool:
    """Whether the model's own generation code (Hugging Face's ``prepare_inputs_for_generation``, asked for one new
    token) hands forward the whole sequence each step rather than the new tokens only: a forward that slices the
    cached prefix off itself is given what its generation gives it."""
    prepare = getattr(model, "prepare_inputs_for_generation", None)
    if not callable(prepare) or decoded.is_floating_point() or decoded.dim() != 2 or decoded.shape[1] < 2:
        return False
    try:
        prepared = prepare(decoded, next_sequence_length=1, use_cache=True)
    except Exception:  # noqa: BLE001 - a generation helper that wants more says nothing about the protocol
        return False
    ids = prepared.get("input_ids") if isinstance(prepared, dict) else None
    return isinstance(ids, torch.Tensor) and tuple(ids.shape) == tuple(decoded.shape)


def _step(ctx, args: tuple, kwargs: dict, what: str, tokens: int, record: bool, on_op=None):
    """One counted forward whose raw return is kept as is (a step may return (output, cache) where the
    full forward returns the output alone). The first step with cached keys is recorded, to name the op
    if it misbehaves."""
    if not record:
        return ctx.call(args, kwargs, what, tokens=tokens), None
    from tfcheck.recording.recorder import Recorder

    recorder = Recorder(ctx.subject.model, aten=False, on_op=on_op)
    with recorder:
        raw = ctx.call(args, kwargs, what, tokens=tokens)
    return raw, recorder.recording


def _raised(raised: ModelRaised, t: int, cache_arg: str) -> Finding:
    e = raised.explanation
    if t == 0:
        return _skip(f"inconclusive: the first decoding step with {cache_arg}=None raised, so the model's cache "
                     f"protocol is not Hugging Face's: {e.message}", {"exception": e.message})
    return Finding(ID, Status.FAIL, f"decoding with the cache raised at step {t + 1} (the first step ran): {e.message}",
                   e.location, {**e.evidence, "step": t + 1}, ROW)


def _step_output(subject, raw: Any) -> torch.Tensor | None:
    try:
        out = subject.extract_output(raw)
    except UsageError:
        out = None
    if isinstance(out, torch.Tensor):
        return out
    logits = raw.get("logits") if isinstance(raw, dict) else getattr(raw, "logits", None)
    if isinstance(logits, torch.Tensor):
        return logits
    if isinstance(raw, (tuple, list)):
        return next((v for v in raw if isinstance(v, torch.Tensor)), None)
    return None


def _returned_cache(raw: Any, cache_arg: str) -> Any:
    """The cache a step returned: under the argument's own name or a Hugging Face name (``cache`` in
    transformers 5, ``past_key_values`` before), else the last element of a returned tuple."""
    names = dict.fromkeys((cache_arg, "cache", "past_key_values"))
    if isinstance(raw, dict):
        return next((raw[n] for n in names if raw.get(n) is not None), None)
    fields = getattr(raw, "__dataclass_fields__", None) or {}
    for n in names:
        if n in fields or (not fields and hasattr(type(raw), n)):
            value = getattr(raw, n, None)
            if value is not None:
                return value
    if isinstance(raw, (tuple, list)) and len(raw) >= 2 and not isinstance(raw[-1], torch.Tensor):
        return raw[-1]
    return None


class _RestartedPositions:
    """``on_op`` for a step after the prefill: ``arange`` calls that number the step's new tokens from 0, where
    they sit after the cached ones (``arange(length)`` instead of ``arange(past, past + length)``)."""

    def __init__(self, new_tokens: int):
        self.new_tokens = new_tokens
        self.found: list[dict] = []

    def __call__(self, event, args: tuple, kwargs: dict, out: Any) -> None:
        if event.level != "function" or event.short_name != "arange" or not isinstance(out, torch.Tensor) \
                or out.device.type == "meta":
            return
        if out.dim() == 1 and out.numel() == self.new_tokens and bool((out == torch.arange(
                self.new_tokens, device=out.device, dtype=out.dtype)).all()):
            self.found.append({"kind": "positions restart at 0", "module": event.module, "file": event.file,
                               "line": event.line, "positions": out.tolist()})


def _top_left_causal(recording) -> list[dict]:
    """scaled_dot_product_attention calls with is_causal=True where queries and keys differ in length:
    is_causal aligns the mask top-left, wrong for queries that come after cached keys."""
    out = []
    for op in recording.ops:
        if op.level == "function" and op.short_name == "scaled_dot_product_attention" and op.scalars.get("is_causal") \
                and len(op.inputs) >= 2 and op.inputs[0].shape[-2:-1] != op.inputs[1].shape[-2:-1]:
            out.append({"kind": "top-left is_causal", "module": op.module, "file": op.file, "line": op.line,
                        "query": op.inputs[0].shape, "key": op.inputs[1].shape})
    return out


def _judge(subject, reference, outputs, suspects, tol, control, cache_arg, length) -> Finding:
    diff = change_per_position(reference, outputs)  # (batch, length)
    per_position = [float(d) for d in diff.amax(0)]
    chunks = _chunks(length)
    prefill, steps = chunks[0][1], len(chunks) - 1
    evidence = {"largest_difference_per_position": per_position, "tolerance": tol, "positive_control_change": control,
                "length": length, "prefill": prefill, "steps": steps, "batch": BATCH, "cache_argument": cache_arg}
    if max(per_position) <= tol:
        return Finding(ID, Status.PASS, f"a prefill of {prefill} and {steps} one-token decoding steps with {cache_arg} "
                       f"match the full forward (largest difference {max(per_position):.3g} <= tolerance {tol:.3g})",
                       Location(module=""), evidence)
    first = next(i for i, d in enumerate(per_position) if d > tol)
    where, named = Location(module="", reason="no op of the decoding step was recognised as the cause (an is_causal "
                            "mask with cached keys, positions restarting at 0): the difference shows only in the "
                            "outputs"), ""
    if suspects:
        s = suspects[0]
        where = Location(module=s["module"], file=s["file"], line=s["line"])
        if s["kind"] == "top-left is_causal":
            named = (f" At the first one-token step, scaled_dot_product_attention in '{s['module'] or '<root>'}' ran "
                     "with is_causal=True on "
                     f"{s['query'][-2]} queries and {s['key'][-2]} keys: is_causal aligns the mask top-left, so the "
                     "new query sees only the first keys. With a cache pass a bottom-right aligned attn_mask instead.")
            evidence["top_left_is_causal"] = [x for x in suspects if x["kind"] == s["kind"]]
        else:
            named = (f" At the first one-token step, arange in '{s['module'] or '<root>'}' at {s['file']}:{s['line']} "
                     f"numbered the new token {s['positions']}, as if no token were cached: positions must continue "
                     "after the cached ones, arange(past_length, past_length + length).")
            evidence["positions_restart_at_0"] = [x for x in suspects if x["kind"] == s["kind"]]
    stage = ("in the prefill (no cache yet)" if first < prefill
             else f"at one-token step {first - prefill + 1} of {steps}")
    message = (f"decoding token by token with {cache_arg} differs from the full forward from position {first} on, "
               f"{stage} (largest difference {max(per_position):.3g}, tolerance {tol:.3g}): training looks fine, "
               "generation is wrong." + named +
               ("" if named else " Check that new positions continue after the cached ones (rotary / positional "
                "offset = past length), that the cache is appended to, not replaced, and that the causal mask is "
                "aligned bottom-right when keys come from the cache."))
    if subject.facts.causal is None:
        return Finding(ID, Status.WARN, message + " The model is not declared causal: declare causal=true to make "
                       "this a failure, causal=false to skip it.", where, evidence)
    return Finding(ID, Status.FAIL, message, where, evidence, ROW)
