"""``replay``: measure one minimal example again, the function every printed replay line calls (public
as ``tfcheck.shrinking.replay``).

Apart from tfcheck.tools.shrinking because it reads the check's property off the battery the front end loaded
(``tfcheck.shrinking`` loads it), and runs the example through the engine.
"""
from __future__ import annotations

from typing import Any

from tfcheck.engine.context import CheckContext
from tfcheck.engine.guard import preserved
from tfcheck.engine.registry import battery
from tfcheck.engine.runner import load_declared
from tfcheck.errors import UsageError
from tfcheck.tools.shrinking import Search, Shown


def replay(model_or_spec: Any, check: str, example: dict, **declarations: Any) -> Shown:
    """Measure one example of ``check`` again (the ``replay`` line of a finding): build the model as
    ``tfcheck.run_checks`` does, run the example's forwards in eval mode, and return what it showed.
    The model is left as it was."""
    shrinkable = {c.id: c.shrink for c in battery() if c.shrink is not None}
    prop = shrinkable.get(check)
    if prop is None:
        raise UsageError(f"replay: no examples for check {check!r}; checks with minimal examples are: "
                         f"{', '.join(shrinkable)}")
    ex = prop.example(example)
    subject = load_declared(model_or_spec, declarations, "replay() argument")
    ctx = CheckContext(subject)
    # As the check measured it: eval-mode dropout left on is neutralised in the flow checks (a no-op on a model
    # whose eval mode is deterministic), so the replay shows the mask, not the noise.
    ctx.neutralising = any(c.id == check and c.flow for c in battery())
    with preserved(subject.model):
        subject.model.eval()
        shown = prop.shows(Search(ctx, max_forwards=2, max_seconds=float("inf")), ex)
    if shown is None:
        raise UsageError(f"replay: the output of {subject.spec} cannot be read per position for this example")
    return shown
