"""Partial-network capture of transformer layers with make_graphed_callables (TransformerEngine-style training)."""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class LayerConfig:
    hidden_size: int = 128
    ffn_hidden_size: int = 384
    num_attention_heads: int = 4
    seq_length: int = 32
    micro_batch_size: int = 4
    debug_numerics: bool = True


class NumericsDebugMixin:
    """Prints activation ranges while bringing up a new recipe."""

    def _debug_numerics(self, name, tensor):
        if self.config.debug_numerics:
            print(f"[layer {self.layer_number}] {name}", tensor.detach().abs().amax())  # expect: CG103


class TransformerLayer(NumericsDebugMixin, nn.Module):
    def __init__(self, config: LayerConfig, layer_number: int):
        super().__init__()
        self.config, self.layer_number = config, layer_number
        h = config.hidden_size
        self.ln_qkv = nn.LayerNorm(h)
        self.qkv = nn.Linear(h, 3 * h)
        self.proj = nn.Linear(h, h)
        self.ln_mlp = nn.LayerNorm(h)
        self.fc1, self.fc2 = nn.Linear(h, config.ffn_hidden_size), nn.Linear(config.ffn_hidden_size, h)

    def forward(self, hidden_states):
        s, b, h = hidden_states.shape
        nh = self.config.num_attention_heads
        q, k, v = self.qkv(self.ln_qkv(hidden_states)).view(s, b, 3, nh, h // nh).permute(2, 1, 3, 0, 4)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        hidden_states = hidden_states + self.proj(attn.permute(2, 0, 1, 3).reshape(s, b, h))
        mlp_act = F.gelu(self.fc1(self.ln_mlp(hidden_states)))
        self._debug_numerics("fc1_act", mlp_act)
        return hidden_states + self.fc2(mlp_act)


def build_layers(config, num_layers, device):
    return nn.ModuleList(TransformerLayer(config, i + 1) for i in range(num_layers)).to(device)


def main():
    torch.manual_seed(0)
    device = "cuda"
    config = LayerConfig()
    layers = build_layers(config, 2, device)
    shape = (config.seq_length, config.micro_batch_size, config.hidden_size)
    sample_args = tuple((torch.randn(shape, device=device, requires_grad=True),) for _ in layers)
    try:
        graphed = torch.cuda.make_graphed_callables(tuple(layers), sample_args, num_warmup_iters=3)
    except Exception as e:
        print(f"capture failed: {type(e).__name__}: {str(e)[:200]}")
        print("VERDICT HAZARD")
        return
    head = nn.Linear(config.hidden_size, 1).to(device)
    params = list(layers.parameters()) + list(head.parameters())
    optimizer = torch.optim.SGD(params, lr=1e-3)
    max_err = 0.0
    for _ in range(3):
        x = torch.randn(shape, device=device, requires_grad=True)
        h = x
        for layer in graphed:
            h = layer(h)
        with torch.no_grad():
            ref = x
            for layer in layers:
                ref = layer(ref)
            max_err = max(max_err, (h - ref).abs().max().item())
        loss = head(h).square().mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    print(f"max |graph - eager| activation error: {max_err:.3e}")
    print("VERDICT HAZARD" if max_err > 1e-3 else "VERDICT OK")


if __name__ == "__main__":
    main()
