"""Benchmark of the probe core and trace_shapes (run: python benchmarks/trace_benchmark.py).

Prints, in one run on this machine:
- the meta-device trace of an 80-layer, d_model 8192 config: build and trace time, peak memory;
- trace_shapes on a real forward (a 12-layer, d_model 768 reference LM at batch 8, length 128) as a
  ratio to a bare forward of the same model and input, and to torchinfo.summary on the same.
Targets (docs/trace.md): the meta trace takes seconds and well under 2 GB; trace_shapes <= 1.5x a bare
forward and cheaper than torchinfo.summary.
"""
from __future__ import annotations

import resource
import statistics
import sys
import time

import torch
import torchinfo

from reference_model import TransformerLM
from tfcheck import trace_shapes


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


def real_trace() -> None:
    torch.manual_seed(0)
    model = TransformerLM(num_layers=12, d_model=768, num_heads=12, d_ff=3072, vocab_size=8000, max_len=256).eval()
    tokens = torch.randint(1, 8000, (8, 128))
    with torch.no_grad():
        model(tokens)  # warm up
        bare = seconds(lambda: model(tokens))
    traced = seconds(lambda: trace_shapes(model, tokens))
    summary = seconds(lambda: torchinfo.summary(model, input_data=[tokens], verbose=0))
    print(f"real forward, 12 layers x d_model 768, batch 8 x length 128: bare {bare * 1e3:.0f} ms, "
          f"trace_shapes {traced * 1e3:.0f} ms ({traced / bare:.2f}x bare, target <= 1.5x), "
          f"torchinfo.summary {summary * 1e3:.0f} ms (trace / summary = {traced / summary:.2f}, target < 1)")


if __name__ == "__main__":
    torch.set_num_threads(max(1, torch.get_num_threads()))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, python {sys.version.split()[0]}")
    meta_trace()
    real_trace()
