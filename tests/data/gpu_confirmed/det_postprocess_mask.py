"""CenterNet-style anchor-free detector (heatmap + box regression) served through a captured CUDA graph."""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class DetConfig:
    num_classes: int = 5
    image_size: int = 64
    stride: int = 4
    width: int = 32
    score_thresh: float = 0.45
    batch: int = 4


class Backbone(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 3, 2, 1), nn.ReLU(), nn.Conv2d(width, width, 3, 2, 1), nn.ReLU()
        )
        self.block = nn.Sequential(nn.Conv2d(width, width, 3, 1, 1), nn.BatchNorm2d(width), nn.ReLU())

    def forward(self, x):
        x = self.stem(x)
        return x + self.block(x)


class CenterHead(nn.Module):
    def __init__(self, width, num_classes):
        super().__init__()
        self.heat = nn.Conv2d(width, num_classes, 1)
        self.box = nn.Conv2d(width, 4, 1)

    def forward(self, feat):
        return self.heat(feat), F.relu(self.box(feat))


class BoxDecoder:
    def __init__(self, cfg: DetConfig):
        self.cfg = cfg
        n = cfg.image_size // cfg.stride
        ys, xs = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
        self.centers = torch.stack([xs, ys], -1).reshape(-1, 2).float().add(0.5).mul(cfg.stride)

    def to(self, device):
        self.centers = self.centers.to(device)
        return self

    def candidates(self, heat, box):
        scores, labels = heat.sigmoid().flatten(2).max(dim=1)
        ltrb = box.flatten(2).transpose(1, 2) * self.cfg.stride
        xy = self.centers.unsqueeze(0)
        boxes = torch.cat([xy - ltrb[..., :2], xy + ltrb[..., 2:]], dim=-1)
        image_idx = torch.arange(heat.shape[0], device=heat.device).unsqueeze(1).expand_as(scores)
        return boxes, scores, labels, image_idx

    def __call__(self, heat, box):
        boxes, scores, labels, image_idx = self.candidates(heat, box)
        keep = scores > self.cfg.score_thresh
        return boxes[keep], scores[keep], labels[keep], image_idx[keep]  # expect: CG106


class Detector(nn.Module):
    def __init__(self, cfg: DetConfig):
        super().__init__()
        self.backbone = Backbone(cfg.width)
        self.head = CenterHead(cfg.width, cfg.num_classes)
        self.decoder = BoxDecoder(cfg)

    def to(self, device):
        self.decoder.to(device)
        return super().to(device)

    def forward(self, images):
        heat, box = self.head(self.backbone(images))
        return self.decoder(heat, box)


class GraphedDetector:
    def __init__(self, model, example):
        self.model = model
        self.static_images = example.clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                model(self.static_images)
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.static_dets = model(self.static_images)

    def __call__(self, images):
        self.static_images.copy_(images)
        self.graph.replay()
        return tuple(t.clone() for t in self.static_dets)


@torch.no_grad()
def main():
    torch.manual_seed(0)
    device = torch.device("cuda")
    cfg = DetConfig()
    model = Detector(cfg).to(device).eval()
    images = [torch.rand(cfg.batch, 3, cfg.image_size, cfg.image_size, device=device) for _ in range(3)]

    reference = [model(x) for x in images]
    print("eager detections per batch:", [int(r[0].shape[0]) for r in reference])

    try:
        runner = GraphedDetector(model, images[0])
        outputs = [runner(x) for x in images]
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001
        print(f"graph path raised {type(exc).__name__}: {exc}")
        print("VERDICT: FAILS")
        return

    ok = all(
        a.shape == b.shape and torch.allclose(a.float(), b.float(), rtol=1e-3, atol=1e-3)
        for out, ref in zip(outputs, reference)
        for a, b in zip(out, ref)
    )
    print("VERDICT: OK" if ok else "VERDICT: DIVERGES")


if __name__ == "__main__":
    main()
