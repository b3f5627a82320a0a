"""Host state advanced inside captured code: a decode position (`self.pos += 1`), a step
counter on an argument object (`state.step += 1`), a generator stepped with next(), and a
cache's token count read into a local and stored back (`self._seen_tokens = end`). Each runs
once, at capture, never on replay: every later replay reads the value it had then."""
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def halving():
    scale = 1.0
    while True:
        yield scale
        scale *= 0.5


class TrainState:
    def __init__(self):
        self.step = 0


class Decoder:
    def __init__(self, cache):
        self.cache = cache
        self.pos = 0

    def __call__(self, x):
        out = x * self.cache[self.pos]
        self.pos += 1  # expect: CG505
        return out


class StaticCache:
    def __init__(self, cache):
        self.cache = cache
        self._seen_tokens = 0

    def update(self, x):
        start = self._seen_tokens
        end = start + 1
        self._seen_tokens = end  # expect: CG505
        return x * self.cache[start:end].sum()


def train_step(x, state):
    state.step += 1  # expect: CG505
    return x * (1.0 / state.step)


def decayed(x, schedule):
    return x * next(schedule)  # expect: CG505


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
kv, eager_kv = StaticCache(cache), StaticCache(cache)
state, eager_state = TrainState(), TrainState()
schedule, eager_schedule = halving(), halving()
graphs = {"position": capture(decoder, static_x), "tokens": capture(kv.update, static_x), "step": capture(train_step, static_x, state),
          "generator": capture(decayed, static_x, schedule)}
eager = {"position": lambda: eager_decoder(static_x), "tokens": lambda: eager_kv.update(static_x),
         "step": lambda: train_step(static_x, eager_state),
         "generator": lambda: decayed(static_x, eager_schedule)}
for run in eager.values():
    run(), run()  # as the warmup and the capture did
same = True
for _ in range(2):
    for name, (graph, out) in graphs.items():
        same &= check(name, graph, out, eager[name]())
print("VERDICT MATCHES" if same else "VERDICT DIVERGES")
