"""A functools.partial rebound and one whose keywords change in place, a closure cell changed
with `nonlocal`, a module-level dict entry rewritten by a callback, an enum member and an
enum.Flag value, a dataclass field read through a property, and entries of dicts the captured
code finds by iterating state (an optimizer-style param group, adapters enabled in a loop
over `.items()`, gates read in a comprehension): each read in capture and changed before a
replay (and put back before the next one)."""
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
        return 1.0 / self.temperature  # expect: CG601


def make_mixer():
    alpha = 0.5

    def mix(a, b):
        return a * alpha + b * (1 - alpha)  # expect: CG601

    def set_alpha(value):
        nonlocal alpha
        alpha = value

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
        self.param_groups = [{"lr": 0.1}]
        self.adapters = {"medical": {"enabled": False}}
        self.gates = {"legal": {"open": False}}

    def __call__(self, x):
        y = self.act(x)  # expect: CG601
        for group in self.param_groups:
            y = y * (1 - group["lr"])  # expect: CG601
        for name, adapter in self.adapters.items():
            if adapter["enabled"]:  # expect: CG202
                y = y + 0.5
        if [name for name, gate in self.gates.items() if gate["open"]]:  # expect: CG202
            y = y * 0.5
        y = SOFTCAP(y)  # expect: CG601
        y = mix(y * SETTINGS["scale"], x)  # expect: CG601
        if self.mode is Mode.GREEDY:  # expect: CG202
            y = y * 0.0
        if Feature.BIAS in FEATURES:  # expect: CG202
            y = y + 1.0
        return y * self.cfg.inverse_temperature  # expect: CG601


def check(name):
    g.replay()
    same = torch.allclose(static_y, head(static_x))
    print(f"CASE {name}: {'MATCHES' if same else 'DIVERGES'}")
    return same


cfg = Config()
head = Head(cfg)
static_x = torch.randn(16, device=DEVICE) * 3
head(static_x)  # warmup
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    static_y = head(static_x)

head.act = functools.partial(scaled, scale=3.0)
same = check("partial rebound")
head.act = functools.partial(scaled, scale=2.0)  # an equal partial: what the graph has
SOFTCAP.keywords["max"] = 1.0
same &= check("partial keywords")
SOFTCAP.keywords["max"] = 4.0
for callback in CALLBACKS:
    callback(2.0)
same &= check("dict entry")
on_settings(1.0)
set_alpha(0.9)
same &= check("closure cell")
set_alpha(0.5)
head.mode = Mode.GREEDY
same &= check("enum member")
head.mode = Mode.SAMPLE
FEATURES = Feature.BIAS
same &= check("flag")
FEATURES = Feature.NONE
cfg.temperature = 2.0
same &= check("dataclass property")
cfg.temperature = 1.0
head.param_groups[0]["lr"] = 0.3
same &= check("param group entry")
head.param_groups[0]["lr"] = 0.1
head.adapters["medical"]["enabled"] = True
same &= check("adapter enabled")
head.adapters["medical"]["enabled"] = False
head.gates["legal"]["open"] = True
same &= check("gate opened in a comprehension")
print("VERDICT MATCHES" if same else "VERDICT DIVERGES")
