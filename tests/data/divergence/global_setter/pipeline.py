import torch

from . import config


def cfg_step(uncond, cond):
    return uncond + config.GUIDANCE * (cond - uncond)  # expect: CG601


def run(uncond, cond, scales):
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = cfg_step(uncond, cond)
    for scale in scales:
        config.set_guidance(scale)
        g.replay()
    return out
