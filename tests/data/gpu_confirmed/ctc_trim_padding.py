"""Utterance encoder for a CTC recipe; padded frames are trimmed in a helper before encoding."""
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F


def trim_to_longest(feats, lengths):
    """Drop the all-padding tail of the batch so the encoder does less work."""
    max_len = int(lengths.max())  # expect: CG101
    return feats[:, :max_len], lengths  # expect: CG701


def length_mask(lengths, max_len):
    return torch.arange(max_len, device=lengths.device)[None, :] < lengths[:, None]


class UtteranceEncoder(nn.Module):
    def __init__(self, n_mels=40, d=128, d_out=64):
        super().__init__()
        self.proj = nn.Linear(n_mels, d)
        self.ff = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, d_out))

    def forward(self, feats, lengths):
        feats, lengths = trim_to_longest(feats, lengths)
        h = self.ff(torch.relu(self.proj(feats)))
        mask = length_mask(lengths, h.shape[1]).unsqueeze(-1).to(h.dtype)
        return (h * mask).sum(1) / mask.sum(1).clamp_min(1.0)


def make_batches(n, batch=8, max_frames=60, n_mels=40):
    g = torch.Generator(device="cuda").manual_seed(2)
    out = []
    for _ in range(n):
        feats = torch.randn(batch, max_frames, n_mels, device="cuda", generator=g)
        lengths = torch.randint(20, max_frames + 1, (batch,), device="cuda", generator=g)
        out.append((feats, lengths, torch.randn(batch, 64, device="cuda", generator=g)))
    return out


def train(encoder, batches):
    opt = torch.optim.SGD(encoder.parameters(), lr=0.05)
    losses = []
    for feats, lengths, target in batches:
        opt.zero_grad(set_to_none=True)
        loss = F.mse_loss(encoder(feats, lengths), target)
        loss.backward()
        opt.step()
        losses.append(loss.detach().clone())
    return losses


def main():
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    base = UtteranceEncoder().cuda()
    batches = make_batches(5)
    eager = train(copy.deepcopy(base), batches)

    try:
        encoder = copy.deepcopy(base)
        sample_feats, sample_lengths, _ = batches[0]
        encoder = torch.cuda.make_graphed_callables(encoder, (sample_feats.clone(), sample_lengths.clone()))
        graphed = train(encoder, batches)
        torch.cuda.synchronize()
    except Exception as exc:
        print("graphed run raised:", type(exc).__name__, (str(exc).splitlines() or [""])[0])
        print("VERDICT: FAILS")
        return
    diverged = False
    for i, (a, b) in enumerate(zip(eager, graphed)):
        ok = torch.allclose(a, b, rtol=1e-4, atol=1e-6)
        print(f"step {i}: eager {a.item():.5f} graphed {b.item():.5f} match={ok}")
        diverged |= not ok
    print("VERDICT: DIVERGES" if diverged else "VERDICT: OK")


if __name__ == "__main__":
    main()
