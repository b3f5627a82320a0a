"""Text-to-image denoising loop with classifier-free guidance; the noise predictor is graph-replayed."""
import math
from dataclasses import dataclass
from typing import Dict, List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class PipelineConfig:
    num_inference_steps: int = 6
    latent_channels: int = 4
    latent_size: int = 8
    text_dim: int = 32
    max_text_len: int = 6
    use_cuda_graph: bool = True


class TextEncoder(nn.Module):
    def __init__(self, vocab_size=100, dim=32):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, dim)
        self.layer = nn.TransformerEncoderLayer(dim, 2, 64, dropout=0.0, batch_first=True)

    def forward(self, ids):
        return self.layer(self.token_embedding(ids))


class CondUNet(nn.Module):
    def __init__(self, channels=4, width=32, text_dim=32):
        super().__init__()
        self.conv_in = nn.Conv2d(channels, width, 3, padding=1)
        self.time_mlp = nn.Sequential(nn.Linear(width, width), nn.SiLU(), nn.Linear(width, width))
        self.q = nn.Linear(width, width)
        self.kv = nn.Linear(text_dim, 2 * width)
        self.norm = nn.GroupNorm(4, width)
        self.conv_out = nn.Conv2d(width, channels, 3, padding=1)
        self.width = width

    def forward(self, sample, timestep, encoder_hidden_states):
        half = self.width // 2
        freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=sample.device) / half)
        t = timestep.float().reshape(-1, 1) * freqs
        temb = self.time_mlp(torch.cat([t.sin(), t.cos()], -1))
        h = self.conv_in(sample) + temb[..., None, None]
        b, c, hh, ww = h.shape
        tokens = self.norm(h).flatten(2).transpose(1, 2)
        k, v = self.kv(encoder_hidden_states).chunk(2, -1)
        attn = F.scaled_dot_product_attention(self.q(tokens), k, v)
        h = h + attn.transpose(1, 2).reshape(b, c, hh, ww)
        return self.conv_out(F.silu(h))


class DDIMLikeScheduler:
    def __init__(self, num_train_timesteps=1000):
        betas = torch.linspace(1e-4, 0.02, num_train_timesteps)
        self.alphas_cumprod = torch.cumprod(1 - betas, 0).tolist()
        self.num_train_timesteps = num_train_timesteps
        self.timesteps: List[int] = []

    def set_timesteps(self, n):
        step = self.num_train_timesteps // n
        self.timesteps = list(range(self.num_train_timesteps - 1, 0, -step))[:n]

    def step(self, noise_pred, t, latents):
        idx = self.timesteps.index(t)
        prev_t = self.timesteps[idx + 1] if idx + 1 < len(self.timesteps) else -1
        a_t = self.alphas_cumprod[t]
        a_prev = self.alphas_cumprod[prev_t] if prev_t >= 0 else 1.0
        x0 = (latents - (1 - a_t) ** 0.5 * noise_pred) / a_t**0.5
        return a_prev**0.5 * x0 + (1 - a_prev) ** 0.5 * noise_pred


class GuidedDiffusionPipeline:
    def __init__(self, config: PipelineConfig, unet: CondUNet, text_encoder: TextEncoder, scheduler: DDIMLikeScheduler):
        self.config = config
        self.unet = unet
        self.text_encoder = text_encoder
        self.scheduler = scheduler
        self._guidance_scale = 1.0
        self._graph: Optional[torch.cuda.CUDAGraph] = None
        self._static: Dict[str, torch.Tensor] = {}

    @property
    def guidance_scale(self):
        return self._guidance_scale

    @property
    def do_classifier_free_guidance(self):
        return self._guidance_scale > 1

    def encode_prompt(self, prompt_ids, negative_prompt_ids):
        # [negative, positive] is always produced so buffer shapes stay fixed
        return torch.cat([self.text_encoder(negative_prompt_ids), self.text_encoder(prompt_ids)])

    def predict_noise(self, latents, t, prompt_embeds):
        if self.do_classifier_free_guidance:
            latent_model_input = torch.cat([latents] * 2)
            embeds = prompt_embeds
        else:
            latent_model_input = latents
            embeds = prompt_embeds[latents.shape[0]:]
        noise_pred = self.unet(latent_model_input, t, encoder_hidden_states=embeds)
        if self.do_classifier_free_guidance:
            noise_pred_uncond, noise_pred_text = noise_pred.chunk(2)
            noise_pred = noise_pred_uncond + self.guidance_scale * (noise_pred_text - noise_pred_uncond)  # expect: CG601
        return noise_pred

    def _capture(self, latents, t, prompt_embeds):
        self._static = {"latents": latents.clone(), "t": t.clone(), "prompt_embeds": prompt_embeds.clone()}
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                self.predict_noise(self._static["latents"], self._static["t"], self._static["prompt_embeds"])
        torch.cuda.current_stream().wait_stream(s)
        self._graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self._graph):
            self._static["noise_pred"] = self.predict_noise(
                self._static["latents"], self._static["t"], self._static["prompt_embeds"]
            )

    def _noise_pred(self, latents, t, prompt_embeds):
        if not self.config.use_cuda_graph:
            return self.predict_noise(latents, t, prompt_embeds)
        if self._graph is None:
            self._capture(latents, t, prompt_embeds)
        self._static["latents"].copy_(latents)
        self._static["t"].copy_(t)
        self._static["prompt_embeds"].copy_(prompt_embeds)
        self._graph.replay()
        return self._static["noise_pred"]

    @torch.no_grad()
    def __call__(self, prompt_ids, negative_prompt_ids, guidance_scale: float = 7.5, seed: int = 0):
        self._guidance_scale = guidance_scale  # expect: CG401
        prompt_embeds = self.encode_prompt(prompt_ids, negative_prompt_ids)
        batch_size = prompt_ids.shape[0]
        gen = torch.Generator(device="cuda").manual_seed(seed)
        cfg = self.config
        latents = torch.randn(
            (batch_size, cfg.latent_channels, cfg.latent_size, cfg.latent_size), generator=gen, device="cuda"
        )
        self.scheduler.set_timesteps(cfg.num_inference_steps)
        for t in self.scheduler.timesteps:
            t_tensor = torch.full((1,), t, device="cuda", dtype=torch.long)
            noise_pred = self._noise_pred(latents, t_tensor, prompt_embeds)
            latents = self.scheduler.step(noise_pred, t, latents)
        return latents


def run(use_cuda_graph: bool):
    torch.manual_seed(0)
    cfg = PipelineConfig(use_cuda_graph=use_cuda_graph)
    pipe = GuidedDiffusionPipeline(cfg, CondUNet().cuda().eval(), TextEncoder().cuda().eval(), DDIMLikeScheduler())
    g = torch.Generator().manual_seed(7)
    prompts = [torch.randint(1, 100, (2, cfg.max_text_len), generator=g).cuda() for _ in range(3)]
    negative = torch.zeros(2, cfg.max_text_len, dtype=torch.long, device="cuda")
    outputs = []
    for prompt, scale in zip(prompts, [7.5, 1.0, 3.0]):
        outputs.append(pipe(prompt, negative, guidance_scale=scale, seed=11))
    return outputs


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    graphed = run(True)
    eager = run(False)
    ok = all(torch.allclose(a, b, rtol=1e-4, atol=1e-4) for a, b in zip(graphed, eager))
    print("VERDICT", "OK" if ok else "HAZARD")


if __name__ == "__main__":
    main()
