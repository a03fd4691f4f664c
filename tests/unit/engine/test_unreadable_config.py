"""A config that refuses some attribute reads (transformers' heterogeneous configs raise
AmbiguousGlobalPerLayerAttributeError on a global per-layer field) is read around, never a crash."""
import torch.nn as nn

import tfcheck
from tfcheck import Status


class PerLayerConfig:
    vocab_size, hidden_size = 50, 16

    def __getattr__(self, name):
        if name in ("num_attention_heads", "head_dim", "num_hidden_layers"):
            raise RuntimeError(f"{name!r} is a per-layer attribute and may vary across layers")
        raise AttributeError(name)


class HeterogeneousLM(nn.Module):
    __tfcheck__ = {"kind": "encoder"}

    def __init__(self):
        super().__init__()
        self.config = PerLayerConfig()
        self.embed, self.head = nn.Embedding(50, 16), nn.Linear(16, 50)

    def forward(self, input_ids):
        return self.head(self.embed(input_ids))


def test_a_config_that_refuses_a_global_read_is_read_around():
    report = tfcheck.run_checks(HeterogeneousLM(), only=["forward.smoke"])
    assert report.models[0].result("forward.smoke").status is Status.PASS
