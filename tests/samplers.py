"""A sampler shared by the replay-guard tests on the CPU (test_replay_guards) and on a GPU
(test_verify_gpu): both must see the same lines read the values a capture freezes."""
from __future__ import annotations

import torch


class AnnealedSampler(torch.nn.Module):
    """A sampler whose temperature is annealed on every call: eager calls between replays move it."""

    def __init__(self):
        super().__init__()
        self.calls = 0
        self.temperature = 1.0

    def forward(self, logits):
        self.calls += 1
        self.temperature = 1.0 + 0.5 * self.calls  # expect: CG601
        return torch.softmax(logits / self.temperature, dim=-1)  # expect: CG601
