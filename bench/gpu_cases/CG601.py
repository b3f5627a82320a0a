"""CG601: A sampler temperature (a Python float attribute) changed after capture."""
# cglint: skip-file
from _harness import *

SEVERITY = "warning"
MEASURE = "max abs difference of the probabilities, replay versus eager, after the temperature changed"


class Sampler:
    def __init__(self, temperature):
        self.temperature = temperature

    def set_temperature(self, temperature):
        self.temperature = temperature

    def __call__(self, logits):
        return torch.softmax(logits / self.temperature, dim=-1)


def hazard():
    sampler = Sampler(0.8)
    logits = torch.randn(4, 32, device=DEV)
    graph, probs = capture(lambda: sampler(logits))
    sampler.set_temperature(0.3)
    replay(graph)
    phase("eager")
    return maxdiff(probs, sampler(logits))
