"""Actor rollout with a CudaGraphModule-style wrapper (modelled on torchrl.compile.CudaGraphModule)."""
import copy
import random

import torch
import torch.nn as nn


class ObservationNorm(nn.Module):
    def __init__(self, in_key, loc, scale):
        super().__init__()
        self.in_key = in_key
        self.register_buffer("loc", loc)
        self.register_buffer("scale", scale)

    def forward(self, td):
        td[self.in_key] = (td[self.in_key] - self.loc) / self.scale
        return td


class MLPActor(nn.Module):
    def __init__(self, obs_dim, action_dim, num_cells=(64, 64), in_key="observation", out_key="loc"):
        super().__init__()
        dims = (obs_dim,) + tuple(num_cells)
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.head = nn.Linear(dims[-1], action_dim)
        self.in_key, self.out_key = in_key, out_key

    def forward(self, td):
        x = td[self.in_key]
        for layer in self.layers:
            x = torch.tanh(layer(x))
        td[self.out_key] = torch.tanh(self.head(x))
        return td


class RandomizedActuatorGain(nn.Module):
    """Domain randomization: every control step sees a slightly different actuator gain."""

    def __init__(self, low=0.7, high=1.3, in_key="loc", out_key="action"):
        super().__init__()
        self.low, self.high = low, high
        self.in_key, self.out_key = in_key, out_key

    def forward(self, td):
        gain = random.uniform(self.low, self.high)  # expect: CG301
        td[self.out_key] = td[self.in_key] * gain
        return td


class TensorDictSequential(nn.Module):
    def __init__(self, *modules):
        super().__init__()
        self.module = nn.ModuleList(modules)

    def forward(self, td):
        for m in self.module:
            td = m(td)
        return td


class CudaGraphModule:
    """Runs `warmup` eager calls on a side stream, captures on the next call, replays afterwards."""

    def __init__(self, module, in_keys, out_keys, warmup=2):
        self.module, self.in_keys, self.out_keys, self.warmup = module, in_keys, out_keys, warmup
        self.counter = 0
        self.graph = None

    def __call__(self, td):
        if self.counter < self.warmup:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                out = self.module(dict(td))
            torch.cuda.current_stream().wait_stream(s)
            self.counter += 1
            return {k: out[k] for k in self.out_keys}
        if self.graph is None:
            self._td_in = {k: td[k].clone() for k in self.in_keys}
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                # hand the module a shallow copy so key rebinding cannot detach our static inputs
                self._td_out = self.module(dict(self._td_in))
        else:
            for k in self.in_keys:
                self._td_in[k].copy_(td[k])
        self.graph.replay()
        return {k: self._td_out[k].clone() for k in self.out_keys}


def make_policy(obs_dim, action_dim, device):
    loc, scale = torch.zeros(obs_dim), torch.full((obs_dim,), 2.0)
    return TensorDictSequential(
        ObservationNorm("observation", loc, scale),
        MLPActor(obs_dim, action_dim),
        RandomizedActuatorGain(),
    ).to(device)


@torch.no_grad()
def main():
    torch.manual_seed(0)
    random.seed(0)
    device = "cuda"
    num_envs, obs_dim, action_dim = 16, 11, 3
    policy = make_policy(obs_dim, action_dim, device)
    ref_policy = copy.deepcopy(policy)
    graphed = CudaGraphModule(policy, in_keys=["observation"], out_keys=["action"])
    max_err = 0.0
    for step in range(8):
        obs = torch.randn(num_envs, obs_dim, device=device)
        state = random.getstate()
        try:
            action = graphed({"observation": obs})["action"]
        except Exception as e:
            print(f"capture failed at step {step}: {type(e).__name__}: {str(e)[:200]}")
            print("VERDICT HAZARD")
            return
        random.setstate(state)
        ref_action = ref_policy({"observation": obs.clone()})["action"]
        max_err = max(max_err, (action - ref_action).abs().max().item())
    print(f"max |graph - eager| action error: {max_err:.3e}")
    print("VERDICT HAZARD" if max_err > 1e-5 else "VERDICT OK")


if __name__ == "__main__":
    main()
