"""A model file that runs its training script when imported (here: waits, as reading a data set would)."""
import time

import torch.nn as nn


class Model(nn.Module):
    def __init__(self, d_model=32):
        super().__init__()
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        return self.proj(x)


for _epoch in range(100):  # the script part, not under `if __name__ == "__main__":`
    time.sleep(0.1)
