"""The forward-error explainer: an exception from the model becomes a finding that names the innermost
module running, the shapes it received, the user's source line and the troubleshooting row.

Two ways in: ``explain(exc, stack, what)`` for an exception raised while ``tracking(model)`` watched the
module stack (the engine, ``tfcheck.watch``), and ``explain_error(exc_or_text)`` (public as
``tfcheck.explain``) for an exception or a message a user already has. Each known message has a
diagnoser below that reads what it can from the text alone, and more when the module stack is known.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from tfcheck.display import rich_view, text_view
from tfcheck.errors import UsageError
from tfcheck.explainers.diagnosers import Diagnosis, Scene, diagnose
from tfcheck.frames import innermost_user_frame, short_path
from tfcheck.model.build.byte_sizes import parse_bytes
from tfcheck.recording.module_stack import ModuleStack
from tfcheck.report.findings import Location, to_jsonable

GENERIC_ROW = "forward-fails"


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
                "evidence": to_jsonable(self.evidence)}

    def __rich__(self):
        return rich_view(self)

    def __str__(self) -> str:
        return text_view(self)


def exception_text(exc: BaseException) -> str:
    """``str(exc)``, or what can be said of an exception whose ``__str__`` itself raises (it must not replace
    the user's exception with tfcheck's)."""
    try:
        return str(exc)
    except Exception as broken:  # noqa: BLE001 - any __str__ may break
        return f"<str() of this {type(exc).__name__} raised {type(broken).__name__}>"


def explain(exc: BaseException, stack: ModuleStack, what: str, budget: int | None = None) -> Explanation:
    """Describe an exception raised by the model during ``what`` (e.g. 'a forward at batch 3, length 7')."""
    inner = stack.innermost()
    scene = Scene(exception_text(exc), stack=stack, model=stack.root(), budget=budget)
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
        return _explanation(error, Scene(exception_text(error), budget=parse_bytes(budget)), "")
    if isinstance(error, str):
        return _explanation(None, Scene(error, budget=parse_bytes(budget)), "")
    raise UsageError(f"tfcheck.explain takes an exception or an error message (str), not {type(error).__name__}")


def _explanation(exc: BaseException | None, scene: Scene, head: str) -> Explanation:
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
    diagnosis = diagnose(scene)
    matched = diagnosis is not None
    if diagnosis is None:
        diagnosis = Diagnosis(GENERIC_ROW, look_at=_generic_look_at(scene))
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


def _generic_look_at(scene: Scene) -> tuple[str, ...]:
    if scene.known:
        return (f"the forward of '{scene.name or '<root>'}' ({type(scene.module).__name__}) and the shapes it "
                "received",)
    return ("the innermost frame of the traceback that is in your own code",
            "run the failing code inside `with tfcheck.watch(model):` to learn which module raised and what "
            "it received")


# ----- where in the user's code ------------------------------------------------------------------------

def user_frame(exc: BaseException) -> tuple[str | None, int | None]:
    """The innermost traceback frame in the user's code: not torch, not tfcheck, not the standard library."""
    frame = innermost_user_frame(exc)
    return (short_path(frame.filename), frame.lineno) if frame is not None else (None, None)
