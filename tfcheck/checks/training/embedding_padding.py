"""embedding.padding (a warning): the pad token's embedding is zero and gets no gradient (padding_idx
matching the declared pad_id), or padding is masked everywhere, so what the pad vector holds cannot reach
a real token's output."""
from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.nn as nn

from tfcheck.checks.training.inference_only import inference_only_design
from tfcheck.engine.registry import NotApplicable, check
from tfcheck.model.build.names import PAD_ID
from tfcheck.probe.flow import change_per_position, tolerance
from tfcheck.recording.hooks import Hook, hooked
from tfcheck.report.findings import Finding, Location
from tfcheck.report.status import Status

ID = "embedding.padding"
#: Pads at the end of the probe (right padding, the usual training layout).
PADS = 2
#: Scale of the random vector added to the pad tokens' (and, as the positive control, a real token's) embedding.
DELTA = 1.0


def _not_applicable(subject) -> NotApplicable | None:
    if (why := inference_only_design(subject)) is not None:
        return why
    if subject.facts.takes_features or subject.facts.inputs is not None:
        return NotApplicable("the model does not take token ids")
    if subject.facts.pad_id is None:
        return NotApplicable("no pad token (pad_id is unknown); declare pad_id=INT if the model is trained on "
                             "padded batches")
    if not _token_embeddings(subject):
        return NotApplicable(f"no nn.Embedding with vocab_size={subject.facts.vocab_size} rows")
    return None


@check(ID, "the pad embedding is zero and untrained, or padding cannot reach real outputs",
       rows=("pad-embedding-not-ignored",), kinds=("encoder", "decoder", "seq2seq", None), order=88,
       applies=_not_applicable)
def embedding_padding(ctx) -> list[Finding]:
    """Read the token embeddings (nn.Embedding with vocab_size rows): padding_idx == pad_id and a zero
    pad row pass with no pass at all. Otherwise one forward of 3 right-padded samples, with a vector added
    to the embedding output at the pad positions of sample 1 and at a real position of sample 2 (the
    positive control, which must move the real outputs): if sample 1's real outputs move, the pad vector
    reaches them, a warning."""
    subject = ctx.subject
    pad = subject.facts.pad_id
    tables = _token_embeddings(subject)
    states = {name: _state(emb, pad) for name, emb in tables}
    evidence = {"pad_id": pad, "embeddings": states}
    wrong = _wrong_padding_idx(subject, tables)
    if wrong:
        return wrong
    if all(s["padding_idx_matches"] and s["pad_row_norm"] == 0 for s in states.values()):
        return [Finding(ID, Status.PASS, f"the pad embedding (id {pad}) is zero and gets no gradient in "
                        f"{', '.join(repr(n) for n in states)} (padding_idx={pad})",
                        subject.construction_site(tables[0][0]), evidence)]
    length = subject.probe_length()
    if length <= PADS + 1:
        return [Finding(ID, Status.SKIP, f"inconclusive: max_len={length} leaves no room for padding",
                        evidence=evidence)]
    name, moved, control, tol = _pad_reach(ctx, tables, pad, length)
    evidence.update(pad_change=moved, positive_control_change=control, tolerance=tol, probe=f"3 x {length}, "
                    f"{PADS} right pads", perturbed=name)
    if name is None:
        return [Finding(ID, Status.SKIP, "inconclusive: no token embedding was called on the probe's tokens",
                        evidence=evidence)]
    if moved is None or control is None or tol is None:
        return [Finding(ID, Status.SKIP, "inconclusive: the output has no (batch, position) axes, so no real token's "
                        "output can be compared; declare 'output' (the logits' index or key) if the forward returns "
                        "more than one thing", evidence=evidence)]
    state = states[name]
    what = (f"padding_idx={state['padding_idx']}" + (f" (pad_id is {pad})" if not state["padding_idx_matches"] else "")
            + f", pad row norm {state['pad_row_norm']:.3g}")
    if control <= tol:
        return [Finding(ID, Status.SKIP, f"inconclusive: the pad embedding of '{name}' is not zero ({what}), and "
                        f"changing a real token's embedding did not change the other outputs either (change "
                        f"{control:.3g}), so the measurement cannot tell", evidence=evidence)]
    if moved <= tol:
        return [Finding(ID, Status.PASS, f"the pad embedding of '{name}' is not zero ({what}), but padding is masked: "
                        f"changing it moves no real token's output (change {moved:.3g} <= {tol:.3g}; a real token's "
                        f"change moves them by {control:.3g})", subject.construction_site(name), evidence)]
    return [Finding(ID, Status.WARN, f"the pad embedding of '{name}' is not zero and not frozen ({what}), and it "
                    f"reaches the real tokens' outputs (change {moved:.3g} > {tol:.3g}): what the pad vector learns "
                    f"leaks into every padded batch. Build the embedding with padding_idx={pad} (re-zero the row after "
                    "any re-initialisation), and mask padding as attention keys", _pad_row_line(subject, name),
                    evidence, row="pad-embedding-not-ignored")]


def _pad_row_line(subject, name: str) -> Location:
    """The line that left the pad row random: a write of the table after it was built (an init over the whole
    weight, or the pad row itself redrawn), else the line that built it without padding_idx."""
    weight = f"{name}.weight"
    written, built = (subject.construction_site(weight, module=name, kind=kind) for kind in ("written", "registered"))
    return written if written.file and (written.file, written.line) != (built.file, built.line) else built


def _wrong_padding_idx(subject, tables: list[tuple[str, nn.Embedding]]) -> list[Finding]:
    """A token embedding whose padding_idx is not the pad id the user stated: a real token's row is frozen at
    zero and the pad row trains. An id only inferred (from that same padding_idx, or by tfcheck) is never
    compared; an id the model names as a pad anywhere (the other side of a seq2seq model) is accepted."""
    stated = _stated_pad_id(subject)
    if stated is None:
        return []
    pad, where = stated
    accepted = {pad, subject.facts.target_pad_id} | _named_pad_ids(subject)
    out = []
    for name, emb in tables:
        if emb.padding_idx is None or emb.padding_idx in accepted:
            continue
        out.append(Finding(
            ID, Status.FAIL, f"nn.Embedding '{name}' has padding_idx={emb.padding_idx}, but the pad id is {pad} "
            f"({where}): token {emb.padding_idx}, a real token, keeps a zero embedding that never trains, and the pad "
            f"token's row is random and trains. Build it with padding_idx={pad}",
            subject.construction_site(name),
            {"padding_idx": emb.padding_idx, "pad_id": pad, "pad_id_from": where, "embedding": name,
             "tolerance": "padding_idx equals the stated pad id"}, row="pad-embedding-not-ignored"))
    return out


def _stated_pad_id(subject) -> tuple[int, str] | None:
    """The pad id the user stated (a declaration, the config or a model attribute, a constructor argument given
    or its default) and where; None when it is inferred or tfcheck filled it."""
    loaded, facts = subject.loaded, subject.facts
    source = facts.sources.get("pad_id", "")
    if "pad_id" in subject.declared and facts.pad_id is not None:
        return facts.pad_id, f"declared: {source}"
    holder, _, field_name = source.partition(".")
    if facts.pad_id is not None and holder in ("config", "model") and \
            field_name not in loaded.config_filled and field_name not in loaded.filled:
        return facts.pad_id, source
    for name, value in _constructor_arguments(subject).items():
        if name in PAD_ID and _is_id(value):
            return value, f"the constructor argument {name}={value}"
    return None


def _named_pad_ids(subject) -> set[int]:
    """Every id a config field, model attribute or constructor argument with 'pad' in its name holds (a seq2seq
    model's trg_pad_idx), tfcheck's own fills left out."""
    loaded = subject.loaded
    holders = [vars(h) for h in (getattr(subject.model, "config", None), subject.model) if hasattr(h, "__dict__")]
    values = {k: v for h in holders for k, v in h.items()
              if k not in loaded.config_filled and k not in loaded.filled}
    values.update(_constructor_arguments(subject))
    return {v for k, v in values.items() if "pad" in k.lower() and _is_id(v)}


def _constructor_arguments(subject) -> dict[str, Any]:
    """The constructor arguments the user gave and the defaults of those not given (a model tfcheck built),
    without those tfcheck filled."""
    loaded = subject.loaded
    if not loaded.constructed:
        return {}
    try:
        params = list(inspect.signature(loaded.origin).parameters.values())
    except (TypeError, ValueError):
        params = []
    defaults = {p.name: p.default for p in params if p.default is not p.empty}
    return {k: v for k, v in {**defaults, **loaded.kwargs}.items() if k not in loaded.filled}


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _token_embeddings(subject) -> list[tuple[str, nn.Embedding]]:
    sizes = {subject.facts.vocab_size, subject.facts.output_vocab_size} - {None}
    return [(n, m) for n, m in subject.model.named_modules()
            if isinstance(m, nn.Embedding) and m.num_embeddings in sizes]


def _state(emb: nn.Embedding, pad: int) -> dict:
    norm = float(emb.weight.detach()[pad].norm()) if 0 <= pad < emb.num_embeddings else float("nan")
    return {"padding_idx": emb.padding_idx, "padding_idx_matches": emb.padding_idx == pad, "pad_row_norm": norm}


def _pad_reach(ctx, tables: list[tuple[str, nn.Embedding]], pad: int,
               length: int) -> tuple[str | None, float | None, float | None, float | None]:
    """(the table perturbed, largest change of sample 1's real outputs, largest change of sample 2's,
    tolerance), from one forward."""
    subject = ctx.subject
    gen = torch.Generator().manual_seed(3)
    row = subject.random_tokens(1, length, gen)
    tokens = row.repeat(3, 1)
    keep = torch.ones(3, length, dtype=torch.bool, device=tokens.device)
    keep[:, length - PADS:] = False
    tokens[~keep] = pad
    target = None
    if subject.takes_target:
        target = subject.random_tokens(1, max(1, length - 2), gen).repeat(3, 1)
    args, kwargs = subject.inputs_for(tokens, target, keep)
    # A random direction: a constant vector would vanish in the next LayerNorm's mean subtraction.
    direction = torch.randn(tables[0][1].embedding_dim, generator=gen)
    delta = torch.zeros(3, length, direction.numel())
    delta[1, length - PADS:] = DELTA * direction
    delta[2, 0] = DELTA * direction
    called: list[str] = []

    def hook_for(name):
        def hook(module, inputs, output):
            # The first call at the probe's shape only: tied tables also embed the decoder input.
            if called or not isinstance(output, torch.Tensor) or tuple(output.shape) != tuple(delta.shape):
                return None
            called.append(name)
            return output + delta.to(output.device, output.dtype)
        return hook

    with hooked(Hook(emb, hook_for(name)) for name, emb in tables):
        out = ctx.run(args, kwargs, "a padded forward with the pad embedding changed").output
    if not called:
        return None, 0.0, 0.0, 0.0
    if out.dim() < 2 or out.shape[0] != tokens.shape[0]:  # a loss or a pooled scalar: no sample's positions to read
        return called[0], None, None, None
    tol = tolerance(out)
    change = change_per_position(out[:1].expand_as(out), out)
    # A seq2seq output is over the target positions, all real: compare them all.
    if target is not None or out.shape[1] != length:
        return called[0], float(change[1].max()), float(change[2].max()), tol
    real = keep[0]
    return called[0], float(change[1][real].max()), float(change[2][real].max()), tol
