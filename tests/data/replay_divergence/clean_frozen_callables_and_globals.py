"""The twin of frozen_callables_and_globals.py: a partial rebound to an equal one, keywords
changed and restored, the dict entry and the flag set before the capture, the enum and the
dataclass field changed after the last replay, the closure cell saved and restored."""
import dataclasses
import enum
import functools

import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
SETTINGS = {"scale": 1.0}
CALLBACKS = []


class Mode(enum.Enum):
    SAMPLE = "sample"
    GREEDY = "greedy"


class Feature(enum.Flag):
    NONE = 0
    BIAS = enum.auto()


FEATURES = Feature.NONE


def scaled(x, scale=1.0):
    return x * scale


SOFTCAP = functools.partial(torch.clamp, min=-4.0, max=4.0)


@dataclasses.dataclass
class Config:
    temperature: float = 1.0

    @property
    def inverse_temperature(self):
        return 1.0 / self.temperature


def make_mixer():
    alpha = 0.5

    def mix(a, b):
        return a * alpha + b * (1 - alpha)

    def set_alpha(value):
        nonlocal alpha
        previous, alpha = alpha, value
        return previous

    return mix, set_alpha


def on_settings(scale):
    SETTINGS["scale"] = scale


CALLBACKS.append(on_settings)
mix, set_alpha = make_mixer()


class Head:
    def __init__(self, cfg):
        self.cfg = cfg
        self.mode = Mode.SAMPLE
        self.act = functools.partial(scaled, scale=2.0)

    def __call__(self, x):
        y = self.act(x)
        y = SOFTCAP(y)
        y = mix(y * SETTINGS["scale"], x)
        if self.mode is Mode.GREEDY:
            y = y * 0.0
        if Feature.BIAS in FEATURES:
            y = y + 1.0
        return y * self.cfg.inverse_temperature


def check(name):
    g.replay()
    same = torch.allclose(static_y, head(static_x))
    print(f"CASE {name}: {'MATCHES' if same else 'DIVERGES'}")
    return same


cfg = Config()
head = Head(cfg)
for callback in CALLBACKS:
    callback(2.0)  # before the capture: the graph has it
FEATURES = Feature.BIAS
static_x = torch.randn(16, device=DEVICE) * 3
head(static_x)  # warmup
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    static_y = head(static_x)

head.act = functools.partial(scaled, scale=2.0)
same = check("equal partial")
SOFTCAP.keywords["max"] = 1.0
SOFTCAP.keywords["max"] = 4.0
saved = set_alpha(0.9)
set_alpha(saved)
static_x.copy_(torch.randn(16, device=DEVICE) * 3)
same &= check("restored")
head.mode = Mode.GREEDY  # after the last replay
cfg.temperature = 2.0
print("VERDICT MATCHES" if same else "VERDICT DIVERGES")
