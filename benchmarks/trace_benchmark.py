"""Benchmark of the probe core and trace_shapes (run: python benchmarks/trace_benchmark.py [--threads N]).

Prints, in one run on this machine:
- the meta-device trace of an 80-layer, d_model 8192 config: build and trace time, peak memory;
- trace_shapes against torchinfo.summary and a bare forward (no_grad) of the same model and input, on the
  reference LM and a GPT-2-small shape (12 layers, d_model 768, random weights) at batch x length 1x1, 1x128
  and 8x128: the median of 5 runs, the three interleaved. "call" times what each returns (trace_shapes' Trace,
  torchinfo's ModelStatistics: neither prints); "+text" adds str() of it, what a reader of the tree or table
  waits for (torchinfo prints its table by default, trace_shapes' repr is one line).
Targets (issue 19, docs/performance.md): trace_shapes' call <= 1.0x torchinfo.summary's at every size; the meta
trace takes seconds and well under 2 GB.
"""
from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torchinfo
from battery_benchmark import gpt2_small

from reference_model import TransformerLM
from tfcheck import trace_shapes

TARGET = 1.0
SIZES = ((1, 1), (1, 128), (8, 128))
#: (name, model builder, vocabulary to draw tokens from)
REFERENCE_LM = ("reference LM", lambda: TransformerLM(max_len=128), 100)  # its default max_len (64) is under 128
GPT2_SMALL = ("GPT-2 small shape", gpt2_small, 50257)
MODELS: tuple[tuple[str, Callable, int], ...] = (REFERENCE_LM, GPT2_SMALL)


def seconds(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def meta_trace() -> None:
    start = time.perf_counter()
    with torch.device("meta"):
        model = TransformerLM(num_layers=80, d_model=8192, num_heads=64, d_ff=32768, vocab_size=32000, max_len=4096)
    built = time.perf_counter() - start
    trace_time = seconds(lambda: trace_shapes(model, device="meta"), repeat=1)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    params = sum(p.numel() for p in model.parameters())
    print(f"meta trace, 80 layers x d_model 8192 ({params / 1e9:.1f} B params): build {built:.2f} s, "
          f"trace {trace_time:.2f} s, peak RSS of this process {peak:.0f} MiB (target: seconds, < 2048 MiB)")


@dataclass
class TraceRow:
    """Seconds of each run, in interleaved rounds: the times are medians, the ratios medians of each round's
    ratio (a change of load between rounds falls on both sides of a ratio alike)."""

    model: str
    size: tuple[int, int]
    times: dict[str, list[float]]  # bare, trace, summary, trace_text, summary_text

    def median(self, key: str) -> float:
        return statistics.median(self.times[key])

    def ratio(self, key: str = "trace", over: str = "summary") -> float:
        return statistics.median(a / b for a, b in zip(self.times[key], self.times[over], strict=True))

    def line(self) -> str:
        size = f"{self.size[0]}x{self.size[1]}"
        met = "met" if self.ratio() <= TARGET else "not met"
        return (f"{self.model:18s} {size:>6s} {self.median('bare') * 1e3:9.1f} {self.median('trace') * 1e3:9.1f} "
                f"{self.median('summary') * 1e3:9.1f} {self.ratio():7.2f}x {self.ratio('trace', 'bare'):7.2f}x "
                f"{self.ratio('trace_text', 'summary_text'):7.2f}x  {met}")


HEADER = (f"{'model':18s} {'size':>6s} {'bare ms':>9s} {'trace ms':>9s} {'tinfo ms':>9s} {'/tinfo':>8s} {'/bare':>8s} "
          f"{'+text':>8s}")


def trace_row(name: str, model: torch.nn.Module, vocab: int, size: tuple[int, int], repeats: int = 5) -> TraceRow:
    tokens = torch.randint(1, vocab, size)

    def bare():
        with torch.no_grad():
            model(tokens)

    timed: dict[str, Callable[[], object]] = {
        "bare": bare,
        "trace": lambda: trace_shapes(model, tokens),
        "summary": lambda: torchinfo.summary(model, input_data=[tokens], verbose=0),
        "trace_text": lambda: str(trace_shapes(model, tokens)),
        "summary_text": lambda: str(torchinfo.summary(model, input_data=[tokens], verbose=0)),
    }
    for fn in timed.values():
        fn()  # warm up: first-call imports and caches are not what a repeated call costs
    times: dict[str, list[float]] = {key: [] for key in timed}
    for _ in range(repeats):  # interleaved, so that a change of load falls on all of them alike
        for key, fn in timed.items():
            start = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - start)
    return TraceRow(name, size, times)


def trace_rows(repeats: int = 5, models: tuple = MODELS, threads: int | None = None) -> list[TraceRow]:
    """Every model at every size; ``threads`` sets torch's thread count for these runs only."""
    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        rows = []
        for name, build, vocab in models:
            torch.manual_seed(0)
            model = build().eval()
            rows.extend(trace_row(name, model, vocab, size, repeats) for size in SIZES)
        return rows
    finally:
        torch.set_num_threads(before)


def print_trace_rows(rows: list[TraceRow], threads: int) -> None:
    print(f"trace_shapes against torchinfo.summary ({threads} threads; median of interleaved runs; "
          f"target: call <= {TARGET}x torchinfo)")
    print(HEADER)
    for row in rows:
        print(row.line())
    print("(/tinfo and /bare: trace_shapes' call over torchinfo.summary's and over a bare no_grad forward, the median "
          "of each round's ratio; +text: each followed by str() of what it returned)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads (default: torch's); 1 on a shared machine, where idle threads spin")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, python {sys.version.split()[0]}")
    meta_trace()
    print_trace_rows(trace_rows(args.repeats), torch.get_num_threads())


if __name__ == "__main__":
    main()
