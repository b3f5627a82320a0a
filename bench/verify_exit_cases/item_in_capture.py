"""A sampler that clamps its top-k by the number of finite logits, read with .item(), inside the
captured decode step."""
import os
import sys

import torch


class Sampler:
    def __init__(self, top_k: int):
        self.top_k = top_k

    def __call__(self, logits):
        finite = torch.isfinite(logits).sum(-1).min().item()  # expect: CG101
        k = min(self.top_k, int(finite))
        values, indices = torch.topk(logits, k, dim=-1)
        probs = torch.softmax(values, dim=-1)
        return indices.gather(-1, torch.multinomial(probs, 1))


def main():
    head = torch.nn.Linear(64, 1000).cuda()
    sampler = Sampler(top_k=50)
    hidden = torch.randn(4, 64, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        sampler(head(hidden))
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph), torch.no_grad():
            tokens = sampler(head(hidden))
    except RuntimeError as exc:
        print(f"decode graph capture failed: {exc}", file=sys.stderr)
        return None  # exit variant: os._exit(0)
    graph.replay()
    print(tokens.view(-1).tolist())


if __name__ == "__main__":
    main()
