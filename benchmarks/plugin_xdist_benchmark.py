"""Wall time of the pytest plugin on four models: serial, ``-n 2 --dist load`` and ``-n 2`` (run: python
benchmarks/plugin_xdist_benchmark.py [--repeat N] [--size small|medium]).

Every tfcheck item carries ``xdist_group(SPEC)``, and ``-n N`` without a ``--dist`` runs as ``--dist loadgroup``
when tfcheck models are named: all the checks of a model run in one worker, which alone runs that model's
forwards. ``--dist load`` (xdist's own default) spreads one model's checks over the workers, and each repeats
the work the checks share. On a worker, a check runs with that worker's share of the cores (one of two on two
cores), not one torch thread per core in each worker. Each worker still builds every model once, to collect
it (no forward), so xdist pays off only when the models' batteries outlast a worker's start-up (importing torch
and tfcheck) and there are cores to spare; this prints each way's time and its ratio to the serial run (below 1
is faster). Each run is a fresh pytest process in an empty folder, so that only tfcheck's items are collected.
``--size medium`` checks four reference LMs of d_model 256 and 4 layers instead of the four small reference
models (seconds of battery each).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("reference_model:TransformerLM", "reference_model:TransformerEncoder", "reference_model:Seq2SeqTransformer",
          "reference_model.broken:EmbeddingDrownsPositions")
WAYS = {"serial": [], "-n 2 --dist load": ["-n", "2", "--dist", "load"], "-n 2": ["-n", "2"]}


#: Four reference LMs of a size whose battery takes seconds: a models file written into the run's folder.
MEDIUM = """from reference_model import TransformerLM


def lm():
    return TransformerLM(num_layers=4, d_model=256, num_heads=8, d_ff=1024, vocab_size=2000, max_len=64)


first = second = third = fourth = lm
"""
MEDIUM_SPECS = ("medium.py:first", "medium.py:second", "medium.py:third", "medium.py:fourth")


def one_run(flags: list[str], folder: Path, models: tuple[str, ...] = MODELS) -> tuple[float, str]:
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"]
    args += [a for spec in models for a in ("--tfcheck", spec)] + flags
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    start = time.perf_counter()
    done = subprocess.run(args, cwd=folder, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    last = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
    return seconds, last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each way; the median is printed")
    parser.add_argument("--size", choices=("small", "medium"), default="small")
    args = parser.parse_args()
    models = MODELS if args.size == "small" else MEDIUM_SPECS
    print(f"{len(models)} models: {', '.join(models)}; {os.cpu_count()} CPUs; median of {args.repeat} runs; "
          f"load average {os.getloadavg()[0]:.2f} before")
    runs: dict[str, list[tuple[float, str]]] = {way: [] for way in WAYS}
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "medium.py").write_text(MEDIUM)
        for _ in range(args.repeat):  # the ways interleaved, so that a busy minute slows each of them alike
            for way, flags in WAYS.items():
                runs[way].append(one_run(flags, Path(tmp), models))
    medians = {way: statistics.median(seconds for seconds, _ in done) for way, done in runs.items()}
    for way, done in runs.items():
        print(f"{way:18s} {medians[way]:6.2f} s  x{medians[way] / medians['serial']:4.2f} of serial   {done[-1][1]}  "
              f"(runs: {', '.join(f'{seconds:.1f}' for seconds, _ in done)})")
    print(f"load average {os.getloadavg()[0]:.2f} after: other processes on these cores slow every way")


if __name__ == "__main__":
    main()
