import torch

NOISE_SCALE = 1.0


def perturb(x):
    return x + NOISE_SCALE * 0.1  # expect: CG601


def main():
    global NOISE_SCALE
    static_x = torch.randn(16, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        perturb(static_x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_y = perturb(static_x)
    matches = True
    for step in range(1, 4):
        NOISE_SCALE = 1.0 / step
        g.replay()
        matches &= torch.allclose(static_y, perturb(static_x))
    print("VERDICT MATCHES" if matches else "VERDICT DIVERGES")


if __name__ == "__main__":
    main()
