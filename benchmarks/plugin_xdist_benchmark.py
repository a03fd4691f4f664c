"""Wall time of the pytest plugin on four models: serial, ``-n 2`` and ``-n 2 --dist loadgroup`` (run: python
benchmarks/plugin_xdist_benchmark.py [--repeat N]).

Every tfcheck item carries ``xdist_group(SPEC)``: under ``--dist loadgroup`` all the checks of a model run in one
worker, which alone runs that model's forwards, while plain ``-n 2`` spreads one model's checks over both workers
and each repeats the work the checks share. Each worker still builds every model once, to collect it, so xdist
pays off only with several models whose batteries outlast a worker's start-up (importing torch and tfcheck);
this prints each way's time and its ratio to the serial run (below 1 is faster). Each run is a fresh pytest
process in an empty folder, so that only tfcheck's items are collected. ``--size medium`` checks four reference
LMs of d_model 256 and 4 layers instead of the four small reference models (seconds of battery each).
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
WAYS = {"serial": [], "-n 2": ["-n", "2"], "-n 2 --dist loadgroup": ["-n", "2", "--dist", "loadgroup"]}


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
    print(f"{len(models)} models: {', '.join(models)}; {os.cpu_count()} CPUs; median of {args.repeat} runs")
    medians: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "medium.py").write_text(MEDIUM)
        for way, flags in WAYS.items():
            runs = [one_run(flags, Path(tmp), models) for _ in range(args.repeat)]
            medians[way] = statistics.median(s for s, _ in runs)
            ratio = medians[way] / medians["serial"]
            print(f"{way:24s} {medians[way]:6.2f} s  x{ratio:4.2f} of serial   {runs[-1][1]}")


if __name__ == "__main__":
    main()
