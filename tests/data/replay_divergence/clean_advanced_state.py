"""The twin of advanced_state.py: a position saved and restored within the call, a step
counter kept in a device tensor and advanced in place, a counter on an object the captured
code builds (a class and a dataclass), and a generator the captured code makes: replays match eager calls."""
import dataclasses

import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def halving():
    scale = 1.0
    while True:
        yield scale
        scale *= 0.5


class TrainState:
    def __init__(self):
        self.step = torch.zeros((), device=DEVICE)


class Scratch:
    def __init__(self):
        self.uses = 0


@dataclasses.dataclass
class Tally:
    n: int = 0


def bump(tally):
    tally.n += 1
    return tally.n


class Decoder:
    def __init__(self, cache):
        self.cache = cache
        self.pos = 0

    def __call__(self, x):
        saved = self.pos
        self.pos += 1
        out = x * self.cache[saved]
        self.pos = saved
        return out


def train_step(x, state):
    state.step += 1
    scratch = Scratch()
    scratch.uses += 1
    return x * (1.0 / state.step) * scratch.uses * bump(Tally())


def decayed(x):
    schedule = halving()
    next(schedule)
    return x * next(schedule)


def capture(fn, *args):
    fn(*args)  # warmup
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(*args)
    return graph, out


def check(name, graph, out, expected):
    graph.replay()
    same = torch.allclose(out, expected)
    print(f"CASE {name}: {'MATCHES' if same else 'DIVERGES'}")
    return same


static_x = torch.randn(16, device=DEVICE)
cache = torch.randn(8, 16, device=DEVICE)
decoder, eager_decoder = Decoder(cache), Decoder(cache)
state, eager_state = TrainState(), TrainState()
graphs = {"position": capture(decoder, static_x), "step": capture(train_step, static_x, state),
          "generator": capture(decayed, static_x)}
eager = {"position": lambda: eager_decoder(static_x), "step": lambda: train_step(static_x, eager_state),
         "generator": lambda: decayed(static_x)}
state.step.zero_()  # a capture runs no kernels on a GPU: count the replays from here
eager_state.step.zero_()
same = True
for _ in range(2):
    for name, (graph, out) in graphs.items():
        same &= check(name, graph, out, eager[name]())
print("VERDICT MATCHES" if same else "VERDICT DIVERGES")
