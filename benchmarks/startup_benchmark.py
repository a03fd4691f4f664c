"""Start-up cost of ``tfcheck check`` on a small model against ``import torch`` (run: python
benchmarks/startup_benchmark.py [--repeats 5] [--spec reference_model:TransformerLM]).

Issue 19's target: the whole battery on the 24k-parameter reference LM takes at most 1.3x the wall time of
``python -c "import torch"`` on the same machine, so what tfcheck adds to torch's own start-up stays small. This
prints the median wall time of each (runs interleaved, so a busy machine slows both alike), their ratio against
the target, and the five top-level imports that cost the check most, read from ``python -X importtime``.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = 1.3
TORCH = [sys.executable, "-c", "import torch"]


def check_command(spec: str) -> list[str]:
    return [sys.executable, "-m", "tfcheck", "check", spec]


def wall(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def top_imports(spec: str, count: int = 5) -> list[tuple[str, float, float]]:
    """(module, cumulative s, self s) of the top-level imports (nested ones are inside their importer's
    cumulative time), most costly first."""
    run = subprocess.run([sys.executable, "-X", "importtime", *check_command(spec)[1:]], cwd=ROOT,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    rows = []
    for line in run.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        own, cumulative, name = line[len("import time:"):].split("|", 2)
        if not name.startswith("  "):  # one space after the bar: imported by code, not by another import
            rows.append((name.strip(), int(cumulative) / 1e6, int(own) / 1e6))
    return sorted(rows, key=lambda r: -r[1])[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--spec", default="reference_model:TransformerLM")
    args = parser.parse_args()
    torch_s, check_s = [], []
    wall(TORCH)  # warm the file cache once, for both
    for _ in range(args.repeats):
        torch_s.append(wall(TORCH))
        check_s.append(wall(check_command(args.spec)))
    base, check = statistics.median(torch_s), statistics.median(check_s)
    print(f'python -c "import torch"      median {base:.2f} s of {args.repeats}')
    print(f"tfcheck check {args.spec}  median {check:.2f} s of {args.repeats}")
    verdict = "met" if check / base <= TARGET else "not met"
    print(f"ratio {check / base:.2f}x (target <= {TARGET}x: {verdict})")
    print("top imports of the check (cumulative / self):")
    for name, cumulative, own in top_imports(args.spec):
        print(f"  {cumulative:6.3f} s  {own:6.3f} s  {name}")


if __name__ == "__main__":
    main()
