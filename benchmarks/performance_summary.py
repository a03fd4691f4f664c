"""Issue 19's numbers side by side, in one run (run: python benchmarks/performance_summary.py [--quick]).

1. The battery on the reference LM, a GPT-2-small shape (12 layers, d_model 768, random weights) and the reference
   seq2seq model: the probe battery's passes (forward + backward) and token-passes, the training checks' passes,
   and the whole battery's time over one forward+backward of the same model at the standard probe size (3 x 7).
   Targets: probe battery <= 10 passes, training checks <= 15 passes on a healthy model. Then, per model, how many
   of the probe battery's forwards a fused probe plan could save at most (pass_map.py), and why the rest stay apart.
2. ``tfcheck check reference_model:TransformerLM`` over ``python -c "import torch"`` (median of --repeats
   interleaved runs; target <= 1.3x).
3. ``trace_shapes`` over ``torchinfo.summary`` (and over a bare forward) at 1x1, 1x128 and 8x128 on the reference
   LM and the GPT-2-small shape (median of --repeats interleaved runs; target <= 1.0x): trace_benchmark.py's rows.
   ``--trace-threads 1`` runs them on one torch thread (on a shared machine idle threads spin and the bare forward
   of the reference LM at 1x1 takes 15 ms instead of 0.5).

--quick leaves out the GPT-2-small shape (minutes on 2 cores). The passes are counted, not timed, and the tests
hold them (tests/integration/test_cost_growth.py); the seconds depend on the machine and its load.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
from battery_benchmark import fwd_bwd_seconds, gpt2_small
from pass_map import ceiling_line, measure
from startup_benchmark import TARGET as STARTUP_TARGET
from startup_benchmark import TORCH, check_command, wall
from trace_benchmark import MODELS as TRACE_MODELS
from trace_benchmark import REFERENCE_LM, print_trace_rows, trace_rows

import tfcheck
from tfcheck.battery import all_checks

PROBE_TARGET, TRAINING_TARGET = 10, 15


def battery_row(name: str, model, tokens: tuple) -> str:
    groups = {c.id: c.group for c in all_checks()}
    start = time.perf_counter()
    results = tfcheck.run_checks(model).models[0].results
    seconds = time.perf_counter() - start
    unit = fwd_bwd_seconds(model, *tokens)
    probe = [r.cost for r in results if groups.get(r.check) == "probe"]
    training = [r.cost for r in results if groups.get(r.check) == "training"]
    probe_passes = sum(c.forward + c.backward for c in probe)
    training_passes = sum(c.forward + c.backward for c in training)
    return (f"{name:34s} {probe_passes:6d} {sum(c.token_passes for c in probe):8d} {training_passes:9d} "
            f"{seconds:8.2f} {unit * 1e3:9.1f} {seconds / unit:8.0f}x")


def startup_row(repeats: int) -> str:
    spec = "reference_model:TransformerLM"
    wall(TORCH)
    base, check = [], []
    for _ in range(repeats):
        base.append(wall(TORCH))
        check.append(wall(check_command(spec)))
    ratio = statistics.median(check) / statistics.median(base)
    return (f"tfcheck check {spec}: {statistics.median(check):.2f} s, import torch {statistics.median(base):.2f} s: "
            f"{ratio:.2f}x (target <= {STARTUP_TARGET}x: {'met' if ratio <= STARTUP_TARGET else 'not met'})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="leave out the GPT-2-small shape")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--trace-threads", type=int, default=None,
                        help="torch threads for the trace rows (default: torch's)")
    args = parser.parse_args()
    from reference_model import Seq2SeqTransformer, TransformerEncoder, TransformerLM

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"\n1. the battery (targets: probe <= {PROBE_TARGET} passes, training <= {TRAINING_TARGET} passes)")
    print(f"{'model':34s} {'probe':>6s} {'tokens':>8s} {'training':>9s} {'seconds':>8s} {'fwd+bwd':>9s} "
          f"{'ratio':>9s}")
    torch.manual_seed(0)
    print(battery_row("reference LM", TransformerLM(), (torch.randint(1, 100, (3, 7)),)))
    print(battery_row("reference seq2seq", Seq2SeqTransformer(),
                      (torch.randint(1, 100, (3, 7)), torch.randint(1, 100, (3, 5)))))
    if not args.quick:
        print(battery_row("GPT-2 small shape", gpt2_small(), (torch.randint(1, 100, (3, 7)),)))
    print("(passes: forward + backward of the model; tokens: the probe battery's token-passes; ratio: the whole "
          "battery's seconds over one forward+backward at 3 x 7)")
    print("\nthe probe battery's forwards by call (pass_map.py lists them one by one):")
    models = [("reference LM", TransformerLM()), ("reference seq2seq", Seq2SeqTransformer()),
              ("reference encoder", TransformerEncoder())]
    for name, model in models + ([] if args.quick else [("GPT-2 small shape", gpt2_small())]):
        print(f"{name:18s} {ceiling_line(measure(model))}")
    print("\n2. start-up")
    print(startup_row(args.repeats))
    print("\n3. ", end="")
    rows = trace_rows(args.repeats, (REFERENCE_LM,) if args.quick else TRACE_MODELS, args.trace_threads)
    print_trace_rows(rows, args.trace_threads or torch.get_num_threads())


if __name__ == "__main__":
    main()
