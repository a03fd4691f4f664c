"""lr.warmup: the declared learning-rate schedule, stepped over the planned steps, starts without an
exception, stays finite and positive, warms up to its peak and stops rising there."""
from __future__ import annotations

import dataclasses
import math

from tfcheck.engine.registry import NotApplicable, check, inconclusive
from tfcheck.probe.schedules import (
    DECLARE_SCHEDULE,
    Curve,
    find_schedule,
    lr_curve,
    noam_rates,
    schedule_lines,
    sparkline,
)
from tfcheck.report.findings import Finding, Location, Related
from tfcheck.report.status import Status

ID = "lr.warmup"
#: Peak rates outside this band are unusual for Adam on a Transformer (the paper's schedule peaks at
#: 7e-4 for d_model 512; BERT and GPT-2 train at 1e-4 .. 6e-4; small models at up to 3e-3).
PLAUSIBLE_PEAK = (1e-6, 1e-2)
NO_SCHEDULE = (f"no schedule declared and the model has no configure_optimizers method; {DECLARE_SCHEDULE}. "
               "warmup_steps=INT and total_steps=INT say what the schedule is meant to do")
#: Relative slack when comparing consecutive rates (float rounding of a formula stepped many times).
SLACK = 1e-6


@check(ID, "the learning-rate schedule warms up to its peak without an exception, NaN, zero or endless rise",
       rows=("lr-schedule-raises", "lr-schedule-invalid", "lr-stuck-at-zero", "lr-zero-first-step",
             "lr-warmup-not-rising", "lr-rises-after-warmup", "lr-peak-implausible"),
       order=80, applies=lambda subject: None if find_schedule(subject) is not None else NotApplicable(NO_SCHEDULE))
def lr_warmup(ctx) -> list[Finding]:
    """Build the declared schedule (a factory fn(optimizer) -> scheduler or fn(params) -> (optimizer,
    scheduler), or the model's configure_optimizers) on a one-element dummy parameter and step the
    scheduler alone over the planned steps (no model pass: microseconds a step). The rate each optimiser
    step would use is judged: no exception at step 0, finite and non-negative, not 0 at the first steps,
    non-decreasing up to the declared warmup step (or the peak) and not rising after it, peak within a
    plausible band for Adam, and compared with the paper's formula where d_model is known."""
    subject = ctx.subject
    schedule = find_schedule(subject)
    assert schedule is not None  # the check applies only where there is one
    curve = lr_curve(subject, schedule)
    if curve.limitation is not None:
        return [inconclusive(ID, curve.limitation, evidence={"schedule": schedule.source})]
    evidence = _evidence(subject, curve)
    if curve.error_step == 0:
        return _located([_raised_at_start(curve, evidence)], curve)
    findings = _judge(subject, curve, evidence)
    if curve.error is not None:
        findings.append(_raised_later(subject, curve, evidence))
    bad = [f for f in findings if f.status is not Status.PASS]
    return _located(bad or findings, curve)


def _located(findings: list[Finding], curve: Curve) -> list[Finding]:
    """Every verdict points at the schedule's code: the line that raised, else the rate function, else the
    factory (named as related when it is not the line pointed at)."""
    lines = schedule_lines(curve)
    where = Location("", *lines.at) if lines.at else Location("", reason=lines.reason)
    related = (Related("the schedule's function", *lines.function),) if lines.function and \
        lines.function != lines.at else ()
    return [dataclasses.replace(f, location=where, related=related) for f in findings]


def _evidence(subject, curve: Curve) -> dict:
    s = curve.schedule
    ev = {"schedule": s.source, "base_lr": s.base_lr, "base_lr_from": s.base_source,
          "rates_are_absolute": s.absolute, "planned_steps": curve.planned, "planned_steps_from": curve.planned_source,
          "warmup_steps": subject.facts.warmup_steps, "steps_taken": len(curve.rates)}
    if curve.rates:
        ev.update(curve=sparkline(curve.rates), first_rates=curve.rates[:5], peak=max(curve.rates),
                  peak_step=curve.peak_step, last_rate=curve.rates[-1], samples=_samples(curve.rates))
    if curve.error is not None:
        ev.update(exception=curve.error, exception_step=curve.error_step)
    return ev


def _samples(rates: list[float], n: int = 9) -> dict[int, float]:
    """A few (step, rate) points on a log-spaced grid, so the evidence shows warmup and decay."""
    steps = sorted({0, 1, len(rates) - 1, *(int(round(math.exp(i / (n - 1) * math.log(len(rates))))) - 1
                                          for i in range(n))})
    return {s: rates[s] for s in steps if 0 <= s < len(rates)}


def _raised_at_start(curve: Curve, evidence: dict) -> Finding:
    hint = ""
    error = curve.error
    assert error is not None  # set with error_step
    if "ZeroDivisionError" in error or "negative power" in error or "math domain" in error:
        hint = (" PyTorch schedulers call the lambda with step 0 first, so the paper's step**-0.5 divides by "
                "zero: count from step + 1, e.g. lambda step: d_model**-0.5 * min((step + 1)**-0.5, "
                "(step + 1) * warmup**-1.5).")
    return Finding(ID, Status.FAIL, f"building {curve.schedule.source} and taking its rate for step 0 raised "
                   f"{curve.error}.{hint}", Location(), {**evidence, "tolerance": "no exception"},
                   row="lr-schedule-raises")


def _raised_later(subject, curve: Curve, evidence: dict) -> Finding:
    if subject.facts.total_steps:
        return Finding(ID, Status.FAIL, f"the scheduler raised {curve.error} at step {curve.error_step}, before "
                       f"the declared total_steps={subject.facts.total_steps}: training would crash there",
                       Location(), {**evidence, "tolerance": "no exception over the planned steps"},
                       row="lr-schedule-raises")
    return Finding(ID, Status.PASS, f"the scheduler stopped at step {curve.error_step} ({curve.error}) before the "
                   f"default {curve.planned} planned steps; judged over the steps it gave. Declare "
                   "total_steps=INT so the run length matches the schedule's.", Location(), evidence)


def _judge(subject, curve: Curve, evidence: dict) -> list[Finding]:
    rates = curve.rates
    bad = next(((i, r) for i, r in enumerate(rates) if not math.isfinite(r) or r < 0), None)
    if bad is not None:
        return [Finding(ID, Status.FAIL, f"the rate at step {bad[0]} is {bad[1]} ({_shown(curve)}): a "
                        f"{'NaN or infinite' if not math.isfinite(bad[1]) else 'negative'} rate corrupts the weights "
                        "at the first step that uses it", Location(),
                        {**evidence, "step": bad[0], "rate": bad[1], "tolerance": "finite and >= 0"},
                        row="lr-schedule-invalid")]
    zeros = next((i for i, r in enumerate(rates) if r > 0), len(rates))
    if zeros == len(rates):
        return [Finding(ID, Status.FAIL, f"the rate is 0 at every one of the {len(rates)} planned steps: nothing "
                        "trains (an integer division such as step // warmup, or a multiplier schedule given lr=0)",
                        Location(), {**evidence, "tolerance": "> 0 at some step"}, row="lr-stuck-at-zero")]
    if zeros > 1:
        return [Finding(ID, Status.FAIL, f"the rate is 0 for the first {zeros} steps and then jumps to "
                        f"{rates[zeros]:.3g} ({_shown(curve)}): warmup does not ramp, it waits. An integer division "
                        "(step // warmup, or int(step / warmup)) is the usual cause: divide as floats, e.g. "
                        "(step + 1) / warmup",
                        Location(), {**evidence, "zero_steps": zeros, "tolerance": "0 at most at step 0"},
                        row="lr-stuck-at-zero")]
    findings = _shape(subject, curve, evidence)
    if zeros == 1:
        findings.append(Finding(ID, Status.WARN, "the rate is 0 at step 0, so the first optimiser step changes no "
                                "weight (the schedule counts warmup from step / warmup, as Hugging Face's "
                                "get_linear_schedule_with_warmup does). Harmless but wasted; (step + 1) / warmup "
                                "makes the first step count", Location(),
                                {**evidence, "tolerance": "> 0 at step 0"}, row="lr-zero-first-step"))
    findings.extend(_peak(curve, evidence))
    if not [f for f in findings if f.status is not Status.PASS]:
        findings.append(_passed(subject, curve, evidence))
    return findings


def _shape(subject, curve: Curve, evidence: dict) -> list[Finding]:
    rates, peak = curve.rates, curve.peak_step
    warmup = subject.facts.warmup_steps
    end = min(warmup, len(rates) - 1) if warmup else peak
    # A schedule counting steps from 1 peaks at warmup - 1 (the Noam formula with step + 1), one counting
    # from 0 at warmup (Hugging Face's): both are right, so the step into `end` may already decay.
    drop = next((i for i in range(1, end) if rates[i] < rates[i - 1] * (1 - SLACK)), None)
    if drop is not None:
        return [Finding(ID, Status.FAIL, f"the rate decays during warmup: step {drop - 1} -> {drop} goes "
                        f"{rates[drop - 1]:.3g} -> {rates[drop]:.3g} before the warmup ends at step {end} "
                        f"({_shown(curve)}); a min/max or sign swapped in the formula is the usual cause",
                        Location(), {**evidence, "step": drop, "tolerance": f"non-decreasing up to step {end}"},
                        row="lr-warmup-not-rising")]
    if warmup:
        slack = max(1, warmup // 100)
        if rates[end] <= rates[0] * (1 + SLACK):
            return [Finding(ID, Status.FAIL, f"warmup_steps={warmup} is declared but the rate does not rise: "
                            f"{rates[0]:.3g} at step 0, {rates[end]:.3g} at step {end} ({_shown(curve)})",
                            Location(), {**evidence, "tolerance": "rate at the warmup step > rate at step 0"},
                            row="lr-warmup-not-rising")]
        if peak > warmup + slack:
            return [Finding(ID, Status.FAIL, f"the rate keeps rising after the declared warmup (step {warmup}: "
                            f"{rates[min(warmup, len(rates) - 1)]:.3g}; peak {rates[peak]:.3g} at step {peak}) "
                            f"({_shown(curve)}): the decay after warmup is missing or never wins",
                            Location(), {**evidence, "tolerance": f"peak at step {warmup} +- {slack}"},
                            row="lr-rises-after-warmup")]
        if peak < warmup - slack:
            return [Finding(ID, Status.FAIL, f"the rate peaks at step {peak}, before the declared warmup_steps="
                            f"{warmup} ({_shown(curve)}): the schedule warms up for fewer steps than declared "
                            "(a warmup given in epochs, or a different value passed to the factory)", Location(),
                            {**evidence, "tolerance": f"peak at step {warmup} +- {slack}"},
                            row="lr-warmup-not-rising")]
        return []
    if peak == len(rates) - 1 and len(rates) > 1 and rates[-1] > rates[-2] * (1 + SLACK):
        declared = subject.facts.total_steps
        status = Status.FAIL if declared else Status.WARN
        tail = ("over the declared total_steps: it never stops rising" if declared else
                f"over all {len(rates)} default planned steps; declare total_steps=INT (and warmup_steps=INT) to "
                "judge it over the real run")
        return [Finding(ID, status, f"the rate still rises at the last step ({rates[-2]:.3g} -> {rates[-1]:.3g}) "
                        f"{tail} ({_shown(curve)})", Location(), {**evidence, "tolerance": "stops rising"},
                        row="lr-rises-after-warmup")]
    return []


def _peak(curve: Curve, evidence: dict) -> list[Finding]:
    top = max(curve.rates)
    base_lr = curve.schedule.base_lr  # set by lr_curve, from the optimizer where not declared
    absolute = curve.schedule.absolute or (base_lr is not None and top < base_lr * (1 - SLACK))
    evidence["peak_judged_as"] = "absolute rate" if absolute else "multiplier of the base rate (not judged)"
    low, high = PLAUSIBLE_PEAK
    if not absolute or low <= top <= high:
        return []
    side = "high" if top > high else "low"
    why = ("the loss of a Transformer under Adam usually diverges at such rates" if side == "high" else
           "training would barely move")
    return [Finding(ID, Status.WARN, f"the peak rate {top:.3g} (step {curve.peak_step}) is {side} for Adam on a "
                    f"Transformer: {why}. If the schedule returns multipliers of your base rate, declare lr=FLOAT; "
                    "if your optimiser is not Adam-like, accept it: accept=lr.warmup:REASON", Location(),
                    {**evidence, "tolerance": f"peak in [{low:g}, {high:g}]"}, row="lr-peak-implausible")]


def _passed(subject, curve: Curve, evidence: dict) -> Finding:
    rates, peak = curve.rates, curve.peak_step
    paper = _paper_match(subject, curve)
    evidence["paper_schedule"] = paper
    if peak == 0:
        shape = (f"no warmup: the rate starts at its peak {rates[0]:.3g}"
                 + (" and stays constant" if rates[-1] >= rates[0] * (1 - SLACK) else f" and decays to {rates[-1]:.3g}")
                 + " (declare warmup_steps=INT if it is meant to warm up)")
    else:
        after = "then constant" if rates[-1] >= rates[peak] * (1 - SLACK) else f"then decays to {rates[-1]:.3g}"
        shape = f"warms up from {rates[0]:.3g} to {rates[peak]:.3g} at step {peak}, {after}"
    note = f"; matches the paper's formula{paper['as']}" if paper.get("matches") else ""
    return Finding(ID, Status.PASS, f"{curve.schedule.source} {shape} over {len(rates)} steps {_shown(curve)}{note}",
                   Location(), evidence)


def _paper_match(subject, curve: Curve) -> dict:
    """Whether the curve is d_model^-0.5 * min(n^-0.5, n * warmup^-1.5) up to a constant factor, counting
    n from step (the paper) or step + 1 (safe at step 0)."""
    d_model = subject.facts.d_model
    rates = curve.rates
    if not d_model or curve.peak_step == 0 or len(rates) < 3:
        return {"compared": False}
    for offset in (1, 0):
        warmup = curve.peak_step + offset
        reference = noam_rates(len(rates), d_model, warmup, offset)
        ratios = [r / p for r, p in zip(rates, reference) if math.isfinite(p) and p > 0]
        if ratios and min(ratios) > 0 and max(ratios) / min(ratios) < 1 + 1e-3:
            factor = sum(ratios) / len(ratios)
            scaled = f" x {factor:.3g}" if abs(factor - 1) > 1e-3 else ""
            return {"compared": True, "matches": True, "d_model": d_model, "warmup": warmup, "n": f"step + {offset}",
                    "factor": factor, "as": f" (d_model={d_model}, warmup={warmup}, n = step + {offset}){scaled}"}
    return {"compared": True, "matches": False, "d_model": d_model}


def _shown(curve: Curve) -> str:
    return f"[{sparkline(curve.rates, 32)}]"
