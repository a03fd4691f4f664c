"""Minimal failing examples: after mask.causal, mask.padding or batch.independence has found a leak, hypothesis
draws batch sizes, lengths and padding patterns and shrinks the failure to the smallest input that still
shows it ("still leaks with batch 1, length 2: output position 0 changes when position 1 changes").

A check's verdict comes from its own batched, deterministic measurement; this search only describes a
failure already found, so a passing model never pays for it. It is bounded (MAX_FORWARDS extra forwards,
MAX_SECONDS of wall time and at most a quarter of the check's budget_s) and reproducible: hypothesis runs
derandomized, with no example database (nothing is written to the working directory) and with every
setting given explicitly, so neither a user's hypothesis profile nor the CI profile changes the result.
The finding's evidence holds the example and a one-line ``replay`` that measures it again.

Each checked property is one class below: the strategy of its examples (tfcheck.model.strategies) and
``shows(search, example)``, the measurement of one example in one or two forwards.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch
import torch.nn as nn

from tfcheck.probe import flow
from tfcheck.ui import leakmap
from tfcheck.errors import UsageError
from tfcheck.report.findings import Finding
from tfcheck.report.status import Status

#: Extra forwards one search may spend (each example costs one or two; outputs shared between examples
#: are reused).
MAX_FORWARDS = 40
#: Wall-clock cap of one search, also never more than a quarter of the check's budget_s.
MAX_SECONDS = 10.0
#: Examples hypothesis generates before it shrinks (most failures show at the very first, simplest one).
MAX_EXAMPLES = 12
#: Largest batch searched (batch.independence: one more), and the longest length when the failing
#: measurement does not say its own (the search never goes longer than the check's measurement).
MAX_BATCH, MAX_LENGTH = 3, 16


@dataclass(frozen=True)
class Shown:
    """What one example showed: the largest forbidden change, its tolerance, and where it was."""

    change: float
    tolerance: float
    detail: str  # e.g. "output position 0 changes by 0.412 when position 1 changes"

    @property
    def leaks(self) -> bool:
        return self.change > self.tolerance

    def __str__(self) -> str:
        verdict = "shows the failure" if self.leaks else "does not show the failure"
        return f"{verdict}: {self.detail} (tolerance {self.tolerance:.3g})"


# ----- examples -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CausalExample:
    """Every sample of a batch with the token at ``position`` changed: no earlier output may move."""

    batch: int
    length: int
    position: int
    seed: int

    def describe(self) -> str:
        return f"batch {self.batch}, length {self.length}"


@dataclass(frozen=True)
class PaddingExample:
    """A padded batch (one keep pattern per sample, True = real) whose pads' content changes."""

    batch: int
    length: int
    keep: tuple[tuple[bool, ...], ...]
    seed: int

    def describe(self) -> str:
        if self.batch == 1:
            return f"batch 1, length {self.length}, {describe_padding(self.keep[0])}"
        samples = "; ".join(f"sample {i} {describe_padding(k)}" for i, k in enumerate(self.keep))
        return f"batch {self.batch}, length {self.length} ({samples})"

    def to_dict(self) -> dict:
        return {"batch": self.batch, "length": self.length, "pads": [layout(k) for k in self.keep],
                "seed": self.seed}

    @classmethod
    def from_dict(cls, data: dict) -> "PaddingExample":
        keep = tuple(tuple(c == "." for c in row) for row in data["pads"])
        return cls(int(data["batch"]), int(data["length"]), keep, int(data["seed"]))


@dataclass(frozen=True)
class BatchExample:
    """A batch whose sample ``sample`` is also run alone (batch 1): its output must be the same."""

    batch: int
    length: int
    sample: int
    seed: int

    def describe(self) -> str:
        return f"batch {self.batch}, length {self.length}"


def layout(keep_row: tuple[bool, ...]) -> str:
    """'.' for a real token, '_' for a pad (the layout mask.padding's evidence shows)."""
    return "".join("." if k else "_" for k in keep_row)


def describe_padding(keep_row: tuple[bool, ...]) -> str:
    """'unpadded', 'one pad at the end', '2 pads at the start', 'pads at positions 1, 3'."""
    pads = [i for i, k in enumerate(keep_row) if not k]
    if not pads:
        return "unpadded"
    count = "one pad" if len(pads) == 1 else f"{len(pads)} pads"
    n = len(keep_row)
    if pads == list(range(n - len(pads), n)):
        return f"{count} at the end"
    if pads == list(range(len(pads))):
        return f"{count} at the start"
    return f"{count} at position{'s' if len(pads) > 1 else ''} {', '.join(map(str, pads))}"


# ----- the search -----------------------------------------------------------------------------------

class _Exhausted(Exception):
    """The search's forward or time budget is spent: no further example is measured."""


class Search:
    """The forwards of one search: counted against its budget, and shared between examples by key."""

    def __init__(self, ctx, max_forwards: int, max_seconds: float):
        self.ctx = ctx
        self.subject = ctx.subject
        self.max_forwards, self.max_seconds = max_forwards, max_seconds
        self.first_forward = ctx.cost.forward
        self.start = time.monotonic()
        self.stopped_by: str | None = None
        self._outputs: dict[Any, torch.Tensor] = {}

    @property
    def forwards(self) -> int:
        return self.ctx.cost.forward - self.first_forward

    def output(self, key: Any, args: tuple, kwargs: dict, what: str,
               during: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext) -> torch.Tensor:
        """The output of one forward; the same ``key`` is run once (a few recent outputs are kept)."""
        if key in self._outputs:
            return self._outputs[key]
        if self.forwards >= self.max_forwards:
            self.stopped_by = f"the budget of {self.max_forwards} forwards"
            raise _Exhausted
        if time.monotonic() - self.start > self.max_seconds:
            self.stopped_by = f"the time limit of {self.max_seconds:g} s"
            raise _Exhausted
        with during():
            out = self.ctx.run(args, kwargs, f"{what} (searching a minimal example)").output.detach()
        if len(self._outputs) >= 8:  # outputs of large vocabularies are big; examples rarely share older ones
            self._outputs.pop(next(iter(self._outputs)))
        self._outputs[key] = out
        return out


def search_settings():
    """The hypothesis settings of every search, each one given so that no profile (a user's, or the CI
    profile hypothesis loads when $CI is set) changes the result or writes an example database."""
    from hypothesis import HealthCheck, Phase, Verbosity
    from hypothesis import settings as hypothesis_settings

    return hypothesis_settings(
        max_examples=MAX_EXAMPLES, derandomize=True, database=None, deadline=None,
        phases=(Phase.generate, Phase.shrink), verbosity=Verbosity.quiet, report_multiple_bugs=False,
        print_blob=False, suppress_health_check=list(HealthCheck), stateful_step_count=1, backend="hypothesis")


def search(ctx, prop: "Property", strategy, max_forwards: int | None = None,
           max_seconds: float | None = None) -> tuple[Any, Shown | None, Search, int]:
    """The smallest example of ``strategy`` that shows the failure: (example or None, what it showed,
    the search, the number of examples measured). Budgets default to MAX_FORWARDS and MAX_SECONDS."""
    from hypothesis import find
    from hypothesis.errors import NoSuchExample, Unsatisfiable

    from tfcheck.engine.context import ModelRaised

    runs = Search(ctx, MAX_FORWARDS if max_forwards is None else max_forwards,
                  MAX_SECONDS if max_seconds is None else max_seconds)
    verdicts: dict[Any, Shown | None] = {}

    def shows(example) -> bool:
        if example not in verdicts:
            try:
                verdicts[example] = prop.shows(runs, example)
            except _Exhausted:
                return False  # not remembered; the budget stays spent, so the answer stays the same
            except (ModelRaised, UsageError):
                verdicts[example] = None  # another failure (the model raised at this size), not this one
        shown = verdicts[example]
        return shown is not None and shown.leaks

    try:
        with isolated_hypothesis():
            example = find(strategy, shows, settings=search_settings())
    except (NoSuchExample, Unsatisfiable):
        return None, None, runs, len(verdicts)
    return example, verdicts[example], runs, len(verdicts)


@contextlib.contextmanager
def isolated_hypothesis() -> Iterator[None]:
    """Hypothesis as if no project were around it, for the block; everything restored after.

    Even with database=None, hypothesis writes a cache of the literals it mines from every local module
    (``.hypothesis/constants/``) into the working directory, and lets those literals bias what it draws,
    so the example found would depend on which of the user's modules are imported (pytest imports more
    than ``tfcheck check``). Its storage goes to a temporary directory, removed after; the mined literals
    are set aside for the block (an internal of hypothesis: where it is missing, only the storage moves)."""
    import shutil
    import tempfile

    from hypothesis import configuration

    home = vars(configuration).get("__hypothesis_home_directory")
    scratch = tempfile.mkdtemp(prefix="tfcheck-hypothesis-")
    configuration.set_hypothesis_home_dir(scratch)
    try:
        with _without_local_constants():
            yield
    finally:
        configuration.set_hypothesis_home_dir(home)
        shutil.rmtree(scratch, ignore_errors=True)


@contextlib.contextmanager
def _without_local_constants() -> Iterator[None]:
    try:
        from hypothesis.internal.conjecture import providers

        mine, cache, empty = providers._get_local_constants, providers.CONSTANTS_CACHE, providers.Constants
    except (ImportError, AttributeError):  # another hypothesis version: its literals may bias the draws
        yield
        return
    cache.cache.clear()  # permitted constants computed with the user's literals
    providers._get_local_constants = lambda: empty()
    try:
        yield
    finally:
        providers._get_local_constants = mine
        cache.cache.clear()  # and those computed without them, so the user's own tests see theirs again


def with_minimal_example(ctx, finding: Finding) -> Finding:
    """``finding`` with the smallest input that still shows its failure (message and evidence), when it is
    a failure or warning of a check that has a property here; any other finding as it is."""
    prop = PROPERTIES.get(finding.check)
    if prop is None or finding.status not in (Status.FAIL, Status.WARN):
        return finding
    from tfcheck.engine.budget import BudgetExceeded

    try:
        if _inside_hypothesis_test():
            return _add(finding, {"minimal_example": None, "minimal_example_search": {
                "result": "not searched: tfcheck ran inside a hypothesis test, where hypothesis allows no nested "
                          "search; run the check outside it to get the minimal example"}})
        strategy = prop.strategy(ctx.subject, finding)
        example, shown, runs, measured = search(ctx, prop, strategy, max_seconds=_seconds(ctx.subject))
    except BudgetExceeded as over:
        # The check's budget ran out during the search: the failure it found stands (and no torch op may
        # run from here on, the deadline being engaged).
        return _add(finding, {"minimal_example": None, "minimal_example_search": {
            "result": f"stopped by the check's time budget ({over}); the failure stands"}})
    except Exception as exc:  # noqa: BLE001 - describing a failure must never lose the failure itself
        return _add(finding, {"minimal_example": None, "minimal_example_search": {
            "result": f"the search raised {type(exc).__name__}: {exc} (a bug in tfcheck; the failure stands)"}})
    searched = {"examples_measured": measured, "forwards": runs.forwards, "budget_forwards": runs.max_forwards,
                "stopped_by": runs.stopped_by, "hypothesis": "derandomize=True, database=None, "
                f"max_examples={MAX_EXAMPLES}, phases=generate+shrink"}
    if example is None:
        searched["result"] = ("no smaller input showed the failure within the search's budget; the check's own "
                              "measurement above is the example")
        return _add(finding, {"minimal_example": None, "minimal_example_search": searched})
    summary = prop.summary(example, shown)
    replay_line = replay_command(ctx.subject, finding.check, example_dict(example))
    evidence = {"minimal_example": {**example_dict(example), "inputs": prop.inputs(ctx.subject, example),
                                    "change": shown.change, "tolerance": shown.tolerance, "shows": shown.detail},
                "minimal_example_search": searched, "replay": replay_line}
    message = (f"{finding.message} Smallest input that still shows it: {summary} (found by hypothesis in "
               f"{runs.forwards} extra forwards; 'replay' in the evidence measures it again).")
    return dataclasses.replace(finding, message=message, evidence={**finding.evidence, **evidence})


def _add(finding: Finding, evidence: dict) -> Finding:
    return dataclasses.replace(finding, evidence={**finding.evidence, **evidence})


def _inside_hypothesis_test() -> bool:
    from hypothesis.control import currently_in_test_context

    return currently_in_test_context()


def _seconds(subject) -> float:
    from tfcheck.engine.budget import DEFAULT_BUDGET_S

    return min(MAX_SECONDS, 0.25 * float(subject.facts.budget_s or DEFAULT_BUDGET_S))


def example_dict(example) -> dict:
    if hasattr(example, "to_dict"):
        return example.to_dict()
    return dataclasses.asdict(example)


# ----- the properties -------------------------------------------------------------------------------

class Property:
    """What one check's examples are, and how one is measured."""

    check: str
    example_type: type

    def strategy(self, subject, finding: Finding):
        raise NotImplementedError

    def shows(self, runs: Search, example) -> Shown | None:
        """Measure ``example``; None when it cannot be read (wrong output shape, nothing finite)."""
        raise NotImplementedError

    def summary(self, example, shown: Shown) -> str:
        raise NotImplementedError

    def inputs(self, subject, example) -> dict:
        """The example's inputs as data (token ids, or the shape of the features), for the evidence."""
        raise NotImplementedError

    def example(self, data: dict):
        if hasattr(self.example_type, "from_dict"):
            return self.example_type.from_dict(data)
        names = {f.name for f in dataclasses.fields(self.example_type)}
        missing = names - set(data)
        if missing:
            raise UsageError(f"a {self.check} example needs {', '.join(sorted(names))}; missing "
                             f"{', '.join(sorted(missing))}")
        return self.example_type(**{k: int(data[k]) for k in names})


def _tokens_or_shape(t: torch.Tensor) -> Any:
    return t.tolist() if not t.is_floating_point() else f"random features {tuple(t.shape)}"


def _longest(finding: Finding, key: str) -> int:
    value = finding.evidence.get(key)
    if isinstance(value, (list, tuple)) and value:
        value = max(value)
    return int(value) if isinstance(value, int) else MAX_LENGTH


def _seq2seq(subject) -> bool:
    return subject.takes_target


def _finite_rows(out: torch.Tensor) -> torch.Tensor:
    """(batch, length) bool: positions whose output is finite."""
    return torch.isfinite(out).reshape(*out.shape[:2], -1).all(-1)


class CausalProperty(Property):
    check, example_type = "mask.causal", CausalExample

    def strategy(self, subject, finding):
        from hypothesis import strategies as st

        from tfcheck.model import strategies as tst

        longest = max(2, _longest(finding, "lengths"))

        @st.composite
        def examples(draw) -> CausalExample:
            b = draw(tst.batch_sizes(1, MAX_BATCH))
            n = draw(tst.lengths(2, longest))
            k = draw(st.integers(1, n - 1))
            return CausalExample(b, n, k, draw(tst.seeds()))

        return examples()

    def _sequences(self, subject, ex: CausalExample):
        gen = torch.Generator().manual_seed(ex.seed)
        where = torch.zeros(ex.batch, ex.length, dtype=torch.bool)
        where[:, ex.position] = True
        where = where.to(subject.device)
        if subject.facts.takes_features:
            base = torch.randn(ex.batch, ex.length, subject.facts.d_model, generator=gen).to(subject.device)
            other = torch.where(where[..., None], torch.randn(base.shape, generator=gen).to(subject.device), base)
        else:
            base = subject.random_tokens(ex.batch, ex.length, gen)
            other = flow.replace_tokens(subject, base, where, ex.seed + 1)
        source = subject.random_primary(ex.batch, ex.length, gen) if subject.kind == "seq2seq" else None
        return base, other, where, source

    def _inputs(self, subject, sequence, source):
        if source is None:
            return subject.inputs_for(sequence)
        from tfcheck.checks.mask.mask_causal import _takes_torch_tgt_mask

        args, kwargs = subject.inputs_for(source, sequence)
        if _takes_torch_tgt_mask(subject):  # as mask.causal does: torch.nn.Transformer leaves it to the caller
            kwargs["tgt_mask"] = nn.Transformer.generate_square_subsequent_mask(sequence.shape[1],
                                                                                device=subject.device)
        return args, kwargs

    def shows(self, runs, ex):
        subject = runs.subject
        base, other, where, source = self._sequences(subject, ex)
        base_out = runs.output(("causal", ex.batch, ex.length, ex.seed), *self._inputs(subject, base, source),
                               f"a forward at batch {ex.batch}, length {ex.length}")
        other_out = runs.output(
            ("causal", ex), *self._inputs(subject, other, source),
            f"a forward at batch {ex.batch}, length {ex.length} with position {ex.position} changed",
            during=lambda: leakmap.perturbed_embedding(subject.model, other, where, ex.seed))
        if base_out.dim() < 2 or tuple(base_out.shape[:2]) != (ex.batch, ex.length) \
                or other_out.shape != base_out.shape:
            return None
        earlier = torch.zeros(ex.batch, ex.length, dtype=torch.bool, device=base_out.device)
        earlier[:, :ex.position] = True
        judged = earlier & _finite_rows(base_out)
        if not bool(judged.any()):
            return None
        change = torch.where(judged, flow.change_per_position(base_out, other_out),
                             torch.full(judged.shape, -1.0, dtype=torch.float64, device=judged.device))
        sample, q = divmod(int(change.argmax()), ex.length)
        largest = float(change.max())
        who = f"sample {sample}'s output" if ex.batch > 1 else "output"
        return Shown(largest, flow.tolerance(torch.where(torch.isfinite(base_out), base_out,
                                                         torch.zeros_like(base_out))),
                     f"{who} position {q} changes by {largest:.3g} when position {ex.position} changes")

    def summary(self, ex, shown):
        return f"still leaks with {ex.describe()}: {shown.detail}"

    def inputs(self, subject, ex):
        base, other, _, source = self._sequences(subject, ex)
        out = {"sequence": _tokens_or_shape(base), "changed_to": _tokens_or_shape(other)}
        if source is not None:
            out["source"] = _tokens_or_shape(source)
        return out


class PaddingProperty(Property):
    check, example_type = "mask.padding", PaddingExample

    def strategy(self, subject, finding):
        from hypothesis import strategies as st

        from tfcheck.model import strategies as tst

        longest = max(2, _longest(finding, "length"))

        @st.composite
        def examples(draw) -> PaddingExample:
            b = draw(tst.batch_sizes(1, MAX_BATCH))
            n = draw(tst.lengths(2, longest))
            keep = list(draw(st.lists(tst.padding_patterns(n), min_size=b, max_size=b)))
            if all(all(row) for row in keep):
                # Padding leaks only where there is some: the simplest draw (no pads) stands for the simplest
                # padded batch, one pad at the end of the last sample.
                keep[-1] = (True,) * (n - 1) + (False,)
            return PaddingExample(b, n, tuple(keep), draw(tst.seeds()))

        return examples()

    def _batch(self, subject, ex: PaddingExample):
        """(base, other, keep, target): the padded batch and the same with other pad content."""
        gen = torch.Generator().manual_seed(ex.seed)
        keep = torch.tensor(ex.keep, dtype=torch.bool).to(subject.device)
        pads = ~keep
        real = subject.random_primary(ex.batch, ex.length, gen)
        pad_id = subject.facts.pad_id
        features = real.is_floating_point()
        base = real if features or pad_id is None else torch.where(pads, torch.full_like(real, pad_id), real)
        # As mask.padding: the pads keep pad_id where it is known (the mask, or positions, may be built from it)
        # and only their embedding changes; other ids (or features) only where no pad id is known.
        ids_changed = features or pad_id is None
        if not ids_changed:
            other = base
        elif features:
            other = torch.where(pads[..., None], torch.randn(base.shape, generator=gen).to(base.device), base)
        else:
            other = flow.replace_tokens(subject, base, pads, ex.seed + 1)
        target = subject.random_primary(ex.batch, ex.length, gen) if _seq2seq(subject) else None
        return base, other, keep, target

    def _inputs(self, subject, primary, target, keep):
        from tfcheck.checks.mask.mask_padding import _inputs

        return _inputs(subject, primary, target, keep)

    def shows(self, runs, ex):
        subject = runs.subject
        base, other, keep, target = self._batch(subject, ex)
        what = f"{ex.batch} padded sample(s) of length {ex.length}"
        base_out = runs.output(("padding", ex), *self._inputs(subject, base, target, keep), what)
        other_out = runs.output(("padding-changed", ex), *self._inputs(subject, other, target, keep),
                                f"{what}, their pads changed",
                                during=lambda: leakmap.perturbed_embedding(subject.model, other, ~keep, ex.seed))
        out_len = ex.length if target is None else target.shape[1]
        if base_out.dim() < 2 or tuple(base_out.shape[:2]) != (ex.batch, out_len) or other_out.shape != base_out.shape:
            return None
        real = keep if target is None else torch.ones(ex.batch, out_len, dtype=torch.bool, device=keep.device)
        judged = real.to(base_out.device) & _finite_rows(base_out)
        if not bool(judged.any()):
            return None
        change = torch.where(judged, flow.change_per_position(base_out, other_out),
                             torch.full(judged.shape, -1.0, dtype=torch.float64, device=judged.device))
        sample, position = divmod(int(change.argmax()), out_len)
        largest = float(change.max())
        who = f"sample {sample}'s" if ex.batch > 1 else "the"
        side = "decoder output" if target is not None else "real output"
        return Shown(largest, flow.tolerance(base_out[judged]),
                     f"{who} {side} at position {position} changes by {largest:.3g} when only the pads' content "
                     "changes")

    def summary(self, ex, shown):
        return f"padding leaks with {ex.describe()}: {shown.detail}"

    def inputs(self, subject, ex):
        base, _, _, target = self._batch(subject, ex)
        out = {"tokens": _tokens_or_shape(base), "layout": [layout(k) for k in ex.keep]}
        if target is not None:
            out["target"] = _tokens_or_shape(target)
        return out


class BatchProperty(Property):
    check, example_type = "batch.independence", BatchExample

    def strategy(self, subject, finding):
        from hypothesis import strategies as st

        from tfcheck.model import strategies as tst

        longest = max(1, _longest(finding, "length"))

        @st.composite
        def examples(draw) -> BatchExample:
            b = draw(tst.batch_sizes(2, MAX_BATCH + 1))
            n = draw(tst.lengths(1, longest))
            return BatchExample(b, n, draw(st.integers(0, b - 1)), draw(tst.seeds()))

        return examples()

    def shows(self, runs, ex):
        from tfcheck.checks.flow.batch_independence import _change, pick_rows

        subject = runs.subject
        batch_inputs = subject.make_inputs(ex.batch, ex.length, ex.seed)
        alone_inputs = pick_rows([batch_inputs], [(0, ex.sample)], ex.batch)
        together = runs.output(("batch", ex.batch, ex.length, ex.seed), *batch_inputs,
                               f"a forward at batch {ex.batch}, length {ex.length}")
        alone = runs.output(("alone", ex), *alone_inputs,
                            f"sample {ex.sample} of that batch alone (batch 1, length {ex.length})")
        if together.dim() < 1 or together.shape[0] != ex.batch or alone.shape[0] != 1 \
                or alone.shape[1:] != together.shape[1:]:
            return None
        change = _change(together[ex.sample], alone[0])
        return Shown(change, flow.tolerance(together),
                     f"sample {ex.sample}'s output changes by {change:.3g} between running alone and in the batch")

    def summary(self, ex, shown):
        return f"samples are still not independent with {ex.describe()}: {shown.detail}"

    def inputs(self, subject, ex):
        args, kwargs = subject.make_inputs(ex.batch, ex.length, ex.seed)
        first = next(v for v in (*args, *kwargs.values()) if isinstance(v, torch.Tensor))
        return {"tokens": _tokens_or_shape(first)}


PROPERTIES: dict[str, Property] = {p.check: p for p in (CausalProperty(), PaddingProperty(), BatchProperty())}


# ----- replay ---------------------------------------------------------------------------------------

def replay(model_or_spec: Any, check: str, example: dict, **declarations: Any) -> Shown:
    """Measure one example of ``check`` again (the ``replay`` line of a finding): build the model as
    ``tfcheck.run_checks`` does, run the example's forwards in eval mode, and return what it showed.
    The model is left as it was."""
    from tfcheck.engine.context import CheckContext
    from tfcheck.engine.runner import load_declared
    from tfcheck.engine.guard import preserved

    prop = PROPERTIES.get(check)
    if prop is None:
        raise UsageError(f"replay: no examples for check {check!r}; checks with minimal examples are: "
                         f"{', '.join(PROPERTIES)}")
    ex = prop.example(example)
    subject = load_declared(model_or_spec, declarations, "replay() argument")
    ctx = CheckContext(subject)
    with preserved(subject.model):
        subject.model.eval()
        shown = prop.shows(Search(ctx, max_forwards=2, max_seconds=float("inf")), ex)
    if shown is None:
        raise UsageError(f"replay: the output of {subject.spec} cannot be read per position for this example")
    return shown


def replay_command(subject, check: str, example: dict) -> str:
    """A shell line that measures the example again; MODEL stands for a model given as an object that no
    spec string names (an instance, a class defined in __main__ or inside a function)."""
    spec = _spec_string(subject)
    target = json.dumps(spec) if spec else "MODEL"
    extra = "".join(f", {key}={_literal(value)}" for key, value in _replayed_declarations(subject).items())
    code = (f"from tfcheck.shrinking import replay; print(replay({target}, {json.dumps(check)}, "
            f"{_literal(example)}{extra}))")
    return f"python -c '{code}'" if "'" not in code else f"python -c {json.dumps(code)}"


def _spec_string(subject) -> str | None:
    label = subject.spec
    if ":" in label and not label.startswith("<"):
        return label
    origin = subject.loaded.origin
    module, qualname = getattr(origin, "__module__", None), getattr(origin, "__qualname__", None)
    if isinstance(origin, nn.Module) or not module or not qualname or module == "__main__" or "<" in qualname:
        return None
    return f"{module}:{qualname}"


def _replayed_declarations(subject) -> dict[str, Any]:
    """The declarations that do not come with the model itself (its __tfcheck__), and that change what an
    example measures."""
    out = {}
    for key, declared in subject.declared.items():
        if declared.source.startswith("__tfcheck__") or key in ("accept", "inputs", "schedule", "budget_s"):
            continue
        value = declared.value
        out[key] = str(value) if type(value).__name__ == "MaskSpec" else value
    return out


def _literal(value: Any) -> str:
    """Python source for a JSON-like value, with double-quoted strings (the line is single-quoted for the shell)."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_literal(str(k))}: {_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    return json.dumps(str(value))
