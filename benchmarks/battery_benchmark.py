"""Cost of the battery against the cost of the model itself (run: python benchmarks/battery_benchmark.py).

For the reference LM and a GPT-2-small-shaped Hugging Face config (12 layers, d_model 768, random weights) it
prints, per check: forward and backward passes, token-passes and wall time; then the probe battery's time and
passes divided by one forward+backward of the same model at the standard probe size (batch 3, length 7),
measured in the same run. Training checks (group "training") are shown apart: their budget is separate.
"""
from __future__ import annotations

import statistics
import time

import torch

import tfcheck
from tfcheck.registry import all_checks



def gpt2_small():
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024))


def fwd_bwd_seconds(model, tokens) -> float:
    params = [p for p in model.parameters() if p.requires_grad]

    def once():
        out = model(tokens)
        logits = out.logits if hasattr(out, "logits") else out
        torch.autograd.grad(logits.float().pow(2).mean(), params)

    once()
    times = []
    for _ in range(3):
        start = time.perf_counter()
        once()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def report(name: str, model) -> None:
    groups = {c.id: c.group for c in all_checks()}
    start = time.perf_counter()
    result = tfcheck.run_checks(model)
    total = time.perf_counter() - start
    tokens = torch.randint(1, 100, (3, 7))
    unit = fwd_bwd_seconds(model, tokens)
    print(f"\n{name}: {sum(p.numel() for p in model.parameters()):,} parameters; one forward+backward at 3x7: "
          f"{unit * 1e3:.1f} ms")
    print(f"{'check':24s} {'group':9s} {'fwd':>4s} {'bwd':>4s} {'tokens':>7s} {'seconds':>8s}")
    probe = {"fwd": 0, "bwd": 0, "s": 0.0}
    for r in result.models[0].results:
        g = groups.get(r.check, "?")
        print(f"{r.check:24s} {g:9s} {r.cost.forward:4d} {r.cost.backward:4d} {r.cost.token_passes:7d} "
              f"{r.seconds:8.3f}")
        if g == "probe":
            probe["fwd"] += r.cost.forward
            probe["bwd"] += r.cost.backward
            probe["s"] += r.seconds
    print(f"probe battery: {probe['fwd']} forwards + {probe['bwd']} backwards (target: at most 30 forward+backward "
          f"passes), {probe['s']:.2f} s = {probe['s'] / unit:.0f}x one forward+backward; whole run incl. training "
          f"checks and loading {total:.2f} s")


if __name__ == "__main__":
    from reference_model import TransformerLM

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    report("reference LM (2 layers, d_model 32)", TransformerLM())
    try:
        report("GPT-2 small shape (12 layers, d_model 768)", gpt2_small())
    except ImportError:
        print("transformers is not installed: pip install 'tfcheck[test]' for the GPT-2 row")
