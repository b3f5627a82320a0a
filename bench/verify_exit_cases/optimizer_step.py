"""A whole training step (forward, backward, Adam) captured in one graph, with an optimizer built
the default way (capturable=False)."""
import os
import sys

import torch
import torch.nn as nn


def make_model():
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 1)).cuda()


def main():
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)  # expect: CG905
    static_x = torch.randn(32, 64, device="cuda")
    static_y = torch.randn(32, 1, device="cuda")

    def step():
        opt.zero_grad(set_to_none=False)
        loss = nn.functional.mse_loss(model(static_x), static_y)
        loss.backward()
        opt.step()  # expect: CG905
        return loss

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            static_loss = step()
    except RuntimeError as exc:
        print(f"capturing the training step failed: {exc}", file=sys.stderr)
        return None  # exit variant: os._exit(0)
    for _ in range(5):
        graph.replay()
    print("loss", static_loss.item())


if __name__ == "__main__":
    main()
