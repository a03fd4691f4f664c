"""Cost of the battery against the cost of the model itself (run: python benchmarks/battery_benchmark.py).

Prints, in one run on this machine:
1. For the reference LM and a GPT-2-small-shaped Hugging Face config (12 layers, d_model 768, random
   weights): per check, forward and backward passes, token-passes and wall time; the probe battery's
   passes against its budget (30 forward+backward passes) and its time divided by one forward+backward
   of the same model at the standard probe size (batch 3, length 7), measured in the same run. The
   training checks (group "training") are shown apart: their budget is separate (`train_steps`).
2. How each probe check's token-passes grow from probe length 16 to 512 (`probe_len`), on the reference
   LM and seq2seq model and on a small GPT-2 config: "growth" is the growth 16 -> 512 divided by the
   length's (32x), "last" the same over the last step (256 -> 512); both must stay near 1 or below (no
   pass per position, no copy per position would give 32 and 2), and the information-flow checks must
   run the same number of passes at every length.

Options: --quick skips the GPT-2-small rows (minutes on 2 cores); --lengths 16,64,512 picks the lengths.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

import tfcheck
from tfcheck.battery import all_checks

PASS_BUDGET = 30
#: Checks whose measurement is a batch of perturbed copies: a constant number of passes at every length.
FLOW = ("batch.independence", "mask.causal", "mask.padding", "position.sensitivity", "cross.dependence",
        "attention.heads", "decode.cache")


def gpt2(**sizes):
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(**sizes))


def gpt2_small():
    return gpt2(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024)


def fwd_bwd_seconds(model, *inputs) -> float:
    params = [p for p in model.parameters() if p.requires_grad]

    def once():
        out = model(*inputs)
        logits = out.logits if hasattr(out, "logits") else out
        torch.autograd.grad(logits.float().pow(2).mean(), params)

    once()
    times = []
    for _ in range(3):
        start = time.perf_counter()
        once()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def battery(name: str, model) -> None:
    groups = {c.id: c.group for c in all_checks()}
    start = time.perf_counter()
    result = tfcheck.run_checks(model)
    total = time.perf_counter() - start
    unit = fwd_bwd_seconds(model, torch.randint(1, 100, (3, 7)))
    print(f"\n{name}: {sum(p.numel() for p in model.parameters()):,} parameters; one forward+backward at 3x7: "
          f"{unit * 1e3:.1f} ms")
    print(f"{'check':24s} {'group':9s} {'status':7s} {'fwd':>4s} {'bwd':>4s} {'reused':>6s} {'tokens':>7s} "
          f"{'seconds':>8s}")
    probe = {"fwd": 0, "bwd": 0, "s": 0.0}
    for r in result.models[0].results:
        g = groups.get(r.check, "?")
        print(f"{r.check:24s} {g:9s} {r.status.value:7s} {r.cost.forward:4d} {r.cost.backward:4d} {r.cost.reused:6d} "
              f"{r.cost.token_passes:7d} {r.seconds:8.3f}")
        if g == "probe":
            probe["fwd"] += r.cost.forward
            probe["bwd"] += r.cost.backward
            probe["s"] += r.seconds
    passes = probe["fwd"] + probe["bwd"]
    verdict = "within" if passes <= PASS_BUDGET else "OVER"
    print(f"probe battery: {probe['fwd']} forwards + {probe['bwd']} backwards = {passes} passes ({verdict} the "
          f"budget of {PASS_BUDGET}); {probe['s']:.2f} s = {probe['s'] / unit:.0f}x one forward+backward. Whole run "
          f"incl. training checks and loading: {total:.2f} s")


def growth(name: str, spec, lengths: list[int], **declared) -> None:
    probe_checks = [c.id for c in all_checks() if c.group == "probe"]
    costs = {}
    for n in lengths:
        results = tfcheck.run_checks(spec, only=probe_checks, probe_len=n, **declared).models[0].results
        costs[n] = {r.check: r.cost for r in results}
    first, last = lengths[0], lengths[-1]
    print(f"\n{name}: token-passes per check at probe_len {', '.join(map(str, lengths))}; growth "
          f"{first} -> {last} over the length's growth ({last / first:g}x)")
    print(f"{'check':24s} " + " ".join(f"{n:>7d}" for n in lengths) + f" {'growth':>7s} {'last':>6s} {'passes':>9s}"
          "  verdict")
    for check in costs[first]:
        tokens = [costs[n][check].token_passes for n in lengths]
        passes = [costs[n][check].forward + costs[n][check].backward for n in lengths]
        if tokens[0] == 0:
            ratio, slope, verdict = 0.0, 0.0, "no pass of its own"
        else:
            ratio = tokens[-1] / tokens[0] / (last / first)
            # the last step alone: an affine a·L - b reads as linear there, a pass per position as 2x per doubling
            slope = tokens[-1] / tokens[-2] / (lengths[-1] / lengths[-2]) if len(lengths) > 1 else ratio
            constant = check not in FLOW or len(set(passes)) == 1
            linear = slope <= 1.05  # the overall ratio also holds the batch still growing at short lengths
            verdict = "linear" if linear and constant else "passes grow" if linear else "SUPERLINEAR"
        print(f"{check:24s} " + " ".join(f"{t:7d}" for t in tokens) +
              f" {ratio:7.2f} {slope:6.2f} {passes[0]:>4d}->{passes[-1]:<4d}  {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip the GPT-2-small rows")
    parser.add_argument("--lengths", default="16,64,128,256,512", help="probe lengths of the growth table")
    args = parser.parse_args()
    lengths = [int(n) for n in args.lengths.split(",")]
    from reference_model import TransformerLM

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    battery("reference LM (2 layers, d_model 32)", TransformerLM())
    growth("reference LM", "reference_model:TransformerLM", lengths, kwargs={"max_len": max(lengths)})
    growth("reference seq2seq", "reference_model:Seq2SeqTransformer", lengths, kwargs={"max_len": max(lengths)})
    try:
        growth("GPT-2 architecture, small config (2 layers, d_model 64)",
               gpt2(n_layer=2, n_embd=64, n_head=4, vocab_size=500, n_positions=max(lengths), bos_token_id=0,
                    eos_token_id=0), lengths)
        if not args.quick:
            battery("GPT-2 small shape (12 layers, d_model 768)", gpt2_small())
    except ImportError:
        print("transformers is not installed: pip install 'tfcheck[test]' for the GPT-2 rows")


if __name__ == "__main__":
    main()
