"""Log-filterbank speech front end with per-utterance automatic gain control."""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn

_INPUT_GAIN = 1.0


def set_input_gain(db: float) -> None:
    global _INPUT_GAIN
    _INPUT_GAIN = 10.0 ** (db / 20.0)


@dataclass
class FrontEndConfig:
    frame: int = 160
    n_mels: int = 40
    n_frames: int = 50
    hidden: int = 64


class FilterbankEncoder(nn.Module):
    def __init__(self, cfg: FrontEndConfig):
        super().__init__()
        self.register_buffer("window", torch.hann_window(cfg.frame))
        self.fbank = nn.Linear(cfg.frame, cfg.n_mels, bias=False)
        self.encoder = nn.Sequential(
            nn.Linear(cfg.n_mels, cfg.hidden), nn.GELU(), nn.Linear(cfg.hidden, 32)
        )

    def forward(self, frames):
        x = frames * self.window
        x = x * _INPUT_GAIN  # expect: CG601
        feats = torch.log1p(self.fbank(x).pow(2))
        return self.encoder(feats)


class AutomaticGainControl:
    def __init__(self, target_rms: float = 0.1):
        self.target_rms = target_rms
        self.last_db = 0.0

    def on_utterance(self, frames: torch.Tensor) -> None:
        rms = frames.pow(2).mean().sqrt().item()
        self.last_db = 20.0 * math.log10(self.target_rms / max(rms, 1e-8))
        set_input_gain(self.last_db)


class GraphedFrontEnd:
    def __init__(self, model, cfg: FrontEndConfig, device):
        self.model = model
        self.static_frames = torch.zeros(cfg.n_frames, cfg.frame, device=device)
        self.graph = torch.cuda.CUDAGraph()
        self.static_out = None

    def capture(self):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                self.model(self.static_frames)
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(self.graph):
            self.static_out = self.model(self.static_frames)

    def __call__(self, frames):
        self.static_frames.copy_(frames)
        self.graph.replay()
        return self.static_out.clone()


@torch.no_grad()
def main():
    torch.manual_seed(0)
    cfg, device = FrontEndConfig(), "cuda"
    model = FilterbankEncoder(cfg).to(device).eval()
    levels = [0.05, 0.3, 1.0, 0.02, 0.6]
    utts = [lvl * torch.randn(cfg.n_frames, cfg.frame, device=device) for lvl in levels]
    agc = AutomaticGainControl()

    ref = []
    for u in utts:
        agc.on_utterance(u)
        ref.append(model(u))
    try:
        agc.on_utterance(utts[0])
        fe = GraphedFrontEnd(model, cfg, device)
        fe.capture()
        out = []
        for u in utts:
            agc.on_utterance(u)
            out.append(fe(u))
        torch.cuda.synchronize()
    except Exception as exc:
        print(f"graph error: {type(exc).__name__}: {exc}")
        print("VERDICT: FAILS")
        return
    ref, out = torch.stack(ref), torch.stack(out)
    print(f"max |diff| = {(out - ref).abs().max().item():.3e}")
    print("VERDICT: OK" if torch.allclose(out, ref, rtol=1e-4, atol=1e-5) else "VERDICT: DIVERGES")


if __name__ == "__main__":
    main()
