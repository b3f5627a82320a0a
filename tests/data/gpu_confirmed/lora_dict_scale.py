import torch
import torch.nn as nn
import torch.nn.functional as F

cfg = {
    "dim": 96,
    "rank": 8,
    "n_layers": 3,
    "lora_scale": 1.0,
    "batch": 16,
}


class LoRALinear(nn.Module):
    def __init__(self, in_features, out_features, rank, cfg):
        super().__init__()
        self.base = nn.Linear(in_features, out_features)
        self.lora_a = nn.Parameter(torch.randn(rank, in_features) * 0.1)
        self.lora_b = nn.Parameter(torch.randn(out_features, rank) * 0.1)
        self.cfg = cfg

    def forward(self, x):
        delta = F.linear(F.linear(x, self.lora_a), self.lora_b)
        return self.base(x) + self.cfg["lora_scale"] * delta  # expect: CG601


class AdapterBlock(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        dim = cfg["dim"]
        self.norm = nn.LayerNorm(dim)
        self.fc = LoRALinear(dim, dim, cfg["rank"], cfg)

    def forward(self, x):
        return x + F.gelu(self.fc(self.norm(x)))


class AdapterModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.blocks = nn.ModuleList([AdapterBlock(cfg) for _ in range(cfg["n_layers"])])
        self.final = nn.LayerNorm(cfg["dim"])

    def forward(self, x):
        for blk in self.blocks:
            x = blk(x)
        return self.final(x)


def build_graph(model, static_x):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            model(static_x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_y = model(static_x)
    return g, static_y


@torch.no_grad()
def main():
    torch.manual_seed(0)
    model = AdapterModel(cfg).cuda().eval()
    static_x = torch.zeros(cfg["batch"], cfg["dim"], device="cuda")
    g, static_y = build_graph(model, static_x)

    requests = torch.randn(6, cfg["batch"], cfg["dim"], device="cuda")
    blend = [1.0, 0.0, 0.5, 2.0, 4.0, 1.0]
    agree = []
    for x, strength in zip(requests, blend):
        cfg["lora_scale"] = strength
        static_x.copy_(x)
        g.replay()
        expected = model(x)
        agree.append(torch.allclose(static_y, expected, rtol=1e-4, atol=1e-4))

    torch.cuda.synchronize()
    print("VERDICT MATCHES" if all(agree) else "VERDICT DIVERGES")


if __name__ == "__main__":
    main()
