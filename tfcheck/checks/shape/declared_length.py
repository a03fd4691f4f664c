"""Output lengths a model's config declares shorter than its input, for shape.contract.

A model that pools the sequence between its blocks (a Funnel-style encoder without its upsampling decoder) or in
windows of a downsampling rate returns fewer positions than it was given, by design. The length it should return
is computed from the config fields that declare the pooling (tfcheck.model.inputs reads them for the shortest
length the model accepts); an output of exactly that length is judged at it, any other length stays a failure.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import torch

from tfcheck.model.build import names
from tfcheck.model.facts.lengths import downsampling, sequence_pooling
from tfcheck.report.findings import Finding
from tfcheck.report.status import Status

#: judge(output length) -> the verdict of the output judged as if that length were expected.
Judge = Callable[[int], Finding]


def declared_lengths(subject, length: int) -> list[tuple[int, str]]:
    """The output lengths the config declares for an input of ``length`` positions, each with the config fields
    that say so; empty when nothing in the config shortens the sequence."""
    out = []
    pooling = sequence_pooling(subject)
    if pooling is not None:
        out.append(_pooled_between_blocks(subject, length, *pooling))
    rate = downsampling(subject)
    if rate is not None:
        stride, where = rate
        out += [(n, where) for n in dict.fromkeys((math.ceil(length / stride), length // stride)) if n > 0]
    return [(n, why) for n, why in out if n != length]


def _pooled_between_blocks(subject, length: int, poolings: int, kept: bool, where: str) -> tuple[int, str]:
    """Each pooling halves the length, rounding up, while more than the kept position and one other remain; a
    first position kept out of the pooling is pooled again as a position of its own unless the config drops the
    last position to make room for it (names.TRUNCATE_SEQ)."""
    config = getattr(subject.model, "config", None)
    truncated = next((n for n in names.TRUNCATE_SEQ if getattr(config, n, False) is True), None) if kept else None
    n = length
    for _ in range(poolings):
        if n <= (2 if kept else 1):
            break  # too short to pool: the block keeps it as it is
        n = math.ceil((n + (kept and truncated is None)) / 2)
    if truncated is not None:
        where += f", config.{truncated} = True drops the last position before each pooling"
    return n, where


def at_declared_length(subject, output: torch.Tensor, length: int, verdict: Finding, judge: Judge) -> Finding:
    """``verdict`` on an output of ``length`` expected positions, judged again at the length the config declares
    where the output has that many positions instead (its evidence then says which: input_length, length_from);
    a length that matches no declaration stays the failure, saying what the config would have given."""
    if verdict.status is not Status.FAIL or verdict.evidence.get("problem") != "shape" or output.dim() != 3 \
            or output.shape[0] != verdict.evidence["batch"] or output.shape[1] == length:
        return verdict
    declared = declared_lengths(subject, length)
    for n, why in declared:
        if output.shape[1] == n:
            again = judge(n)
            return dataclasses.replace(again, evidence={**again.evidence, "input_length": length, "length_from": why})
    if not declared:
        return verdict
    said = "; ".join(f"{why}: {n} positions" for n, why in declared)
    return dataclasses.replace(verdict, message=f"{verdict.message}; the config shortens the sequence ({said}), "
                               f"and {output.shape[1]} matches none of it")


def size_text(evidence: dict) -> str:
    """``batch x length`` of one probe, with the length pooled to where the config declares it (1x5->2)."""
    pooled = f"{evidence['input_length']}->" if "input_length" in evidence else ""
    return f"{evidence['batch']}x{pooled}{evidence['length']}"


def pooled_note(checked: list[Finding]) -> str:
    """What a pass says of lengths judged where the config declares them, or nothing."""
    why = next((v.evidence["length_from"] for v in checked if "length_from" in v.evidence), None)
    return "" if why is None else f": the sequence pooled to the length its config declares ({why})"
