"""Speech-command classifier trained with a gain curriculum; the encoder goes through make_graphed_callables."""
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

N_MELS = 40
FRAMES = 50
INPUT_GAIN = 1.0  # curriculum knob, raised as training progresses


def apply_input_gain(feats):
    """Scale log-mel features by the current curriculum gain (mimics louder/quieter utterances)."""
    return feats * INPUT_GAIN  # expect: CG601


def set_curriculum(step):
    global INPUT_GAIN
    INPUT_GAIN = 1.0 + 0.5 * step


class FrameEncoder(nn.Module):
    def __init__(self, hidden=96, n_classes=12):
        super().__init__()
        self.frame_proj = nn.Linear(N_MELS, hidden)
        self.mix = nn.Linear(hidden, hidden)
        self.cls = nn.Linear(hidden, n_classes)

    def forward(self, feats):
        h = torch.tanh(self.frame_proj(apply_input_gain(feats)))
        h = torch.tanh(self.mix(h)).mean(dim=1)
        return self.cls(h)


def batches(n, batch=16, n_classes=12):
    g = torch.Generator(device="cuda").manual_seed(3)
    return [(torch.randn(batch, FRAMES, N_MELS, device="cuda", generator=g),
             torch.randint(0, n_classes, (batch,), device="cuda", generator=g)) for _ in range(n)]


def train(encoder, data):
    opt = torch.optim.SGD(encoder.parameters(), lr=0.1)
    log = []
    for step, (x, y) in enumerate(data):
        set_curriculum(step)
        opt.zero_grad(set_to_none=True)
        logits = encoder(x)
        loss = F.cross_entropy(logits, y)
        loss.backward()
        log.append((logits.detach().clone(), loss.detach().clone()))
        opt.step()
    return log


def main():
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    base = FrameEncoder().cuda()
    data = batches(6)

    eager_log = train(copy.deepcopy(base), data)

    try:
        set_curriculum(0)
        encoder = copy.deepcopy(base)
        sample = torch.randn(16, FRAMES, N_MELS, device="cuda")
        graphed = torch.cuda.make_graphed_callables(encoder, (sample,))
        graph_log = train(graphed, data)
        torch.cuda.synchronize()
    except Exception as exc:
        print("graphed run raised:", type(exc).__name__, (str(exc).splitlines() or [""])[0])
        print("VERDICT: FAILS")
        return

    diverged = False
    for step, ((le, lo_e), (lg, lo_g)) in enumerate(zip(eager_log, graph_log)):
        ok = torch.allclose(le, lg, rtol=1e-4, atol=1e-5) and torch.allclose(lo_e, lo_g, rtol=1e-4, atol=1e-6)
        print(f"step {step}: gain={1.0 + 0.5 * step:.1f} eager loss {lo_e.item():.5f} graphed loss {lo_g.item():.5f} match={ok}")
        diverged |= not ok
    print("VERDICT: DIVERGES" if diverged else "VERDICT: OK")


if __name__ == "__main__":
    main()
