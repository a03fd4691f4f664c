"""Wall time of the zero-config battery on hand-written models with real-size defaults (run: python
benchmarks/frontdoor_benchmark.py).

The front door builds a model small by default: an Annotated-Transformer-style ``make_model(src_vocab,
tgt_vocab, N=6, d_model=512, d_ff=2048, h=8)`` is built with its sizes shrunk (invariants kept), so a
newcomer's first ``tfcheck check file.py:make_model`` takes seconds. This prints, for each model, the
parameters tfcheck built, the battery's wall time, and with ``--defaults`` the same with ``shrink=false``
(the sizes as written: minutes on 2 cores) and the ratio of the two.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import tfcheck
from tfcheck.engine.runner import load_declared, run_model

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "support" / "frontdoor_build"
#: Models written in the style of public implementations, with their real-size defaults (fixtures of the tests).
MODELS = ("annotated_style.py:make_model", "nanogpt_style.py:GPT", "mingpt_style.py:GPT")


def battery(spec: str, **declared) -> tuple[int, float, str]:
    start = time.perf_counter()
    subject = load_declared(spec, declared, "benchmark")
    report = run_model(subject)
    seconds = time.perf_counter() - start
    params = sum(p.numel() for p in subject.model.parameters())
    return params, seconds, report.status.value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--defaults", action="store_true", help="also run each model at its written sizes")
    args = parser.parse_args()
    sys.path.insert(0, str(FIXTURES))
    import os

    os.chdir(FIXTURES)  # specs are relative file paths, as a user types them
    print(f"tfcheck {tfcheck.__version__}: zero-config battery, built small by default")
    print(f"{'model':36} {'params':>11} {'seconds':>8} {'status':>7}" +
          (f" {'params (as written)':>20} {'seconds':>8} {'ratio':>6}" if args.defaults else ""))
    for spec in MODELS:
        params, seconds, status = battery(spec)
        line = f"{spec:36} {params:>11,} {seconds:>8.1f} {status:>7}"
        if args.defaults:
            big_params, big_seconds, _ = battery(spec, shrink=False, budget_s=600)
            line += f" {big_params:>20,} {big_seconds:>8.1f} {big_seconds / seconds:>6.1f}"
        print(line)


if __name__ == "__main__":
    main()
