"""Static-cache decoding for a small Llama-style model with dynamic NTK rotary scaling.

Decode steps are replayed from a CUDA graph; prefill runs eagerly.
"""
from dataclasses import dataclass, field
from typing import Dict, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class LlamaConfig:
    vocab_size: int = 96
    hidden_size: int = 64
    intermediate_size: int = 128
    num_attention_heads: int = 4
    num_hidden_layers: int = 2
    max_position_embeddings: int = 12
    rope_theta: float = 10000.0
    rope_scaling: Dict[str, float] = field(default_factory=lambda: {"rope_type": "dynamic", "factor": 4.0})
    rms_norm_eps: float = 1e-6

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


def _compute_default_rope_parameters(config: LlamaConfig, device=None, seq_len=None) -> Tuple[torch.Tensor, float]:
    base = config.rope_theta
    dim = config.head_dim
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float().to(device) / dim))
    return inv_freq, 1.0


def _compute_dynamic_ntk_parameters(config: LlamaConfig, device=None, seq_len=None) -> Tuple[torch.Tensor, float]:
    base = config.rope_theta
    dim = config.head_dim
    max_position_embeddings = config.max_position_embeddings
    factor = config.rope_scaling["factor"]
    seq_len = seq_len if seq_len is not None and seq_len > max_position_embeddings else max_position_embeddings
    base = base * ((factor * seq_len / max_position_embeddings) - (factor - 1)) ** (dim / (dim - 2))
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float().to(device) / dim))
    return inv_freq, 1.0


ROPE_INIT_FUNCTIONS = {
    "default": _compute_default_rope_parameters,
    "dynamic": _compute_dynamic_ntk_parameters,
}


class LlamaRotaryEmbedding(nn.Module):
    def __init__(self, config: LlamaConfig, device=None):
        super().__init__()
        self.rope_type = config.rope_scaling.get("rope_type", "default") if config.rope_scaling else "default"
        self.max_seq_len_cached = config.max_position_embeddings
        self.original_max_seq_len = config.max_position_embeddings
        self.config = config
        self.rope_init_fn = ROPE_INIT_FUNCTIONS[self.rope_type]
        inv_freq, self.attention_scaling = self.rope_init_fn(self.config, device)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.original_inv_freq = self.inv_freq

    def dynamic_frequency_update(self, seq_len: int, device):
        """Host-side update, called with the known total length before each forward."""
        if seq_len > self.max_seq_len_cached:  # growth
            inv_freq, self.attention_scaling = self.rope_init_fn(self.config, device, seq_len=seq_len)
            self.register_buffer("inv_freq", inv_freq, persistent=False)  # expect: CG401
            self.max_seq_len_cached = seq_len
        if seq_len < self.original_max_seq_len and self.max_seq_len_cached > self.original_max_seq_len:  # reset
            self.original_inv_freq = self.original_inv_freq.to(device)
            self.register_buffer("inv_freq", self.original_inv_freq, persistent=False)  # expect: CG401
            self.max_seq_len_cached = self.original_max_seq_len

    def forward(self, x, position_ids):
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        position_ids_expanded = position_ids[:, None, :].float()
        freqs = (inv_freq_expanded @ position_ids_expanded).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos() * self.attention_scaling
        sin = emb.sin() * self.attention_scaling
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


class StaticCache:
    def __init__(self, config: LlamaConfig, max_batch_size: int, max_cache_len: int, device):
        shape = (max_batch_size, config.num_attention_heads, max_cache_len, config.head_dim)
        self.key_cache = [torch.zeros(shape, device=device) for _ in range(config.num_hidden_layers)]
        self.value_cache = [torch.zeros(shape, device=device) for _ in range(config.num_hidden_layers)]
        self.max_cache_len = max_cache_len

    def update(self, key_states, value_states, layer_idx, cache_position):
        k_out, v_out = self.key_cache[layer_idx], self.value_cache[layer_idx]
        k_out.index_copy_(2, cache_position, key_states)
        v_out.index_copy_(2, cache_position, value_states)
        return k_out, v_out


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        return self.weight * hidden_states * torch.rsqrt(variance + self.variance_epsilon)


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config: LlamaConfig, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        h = config.hidden_size
        self.q_proj = nn.Linear(h, h, bias=False)
        self.k_proj = nn.Linear(h, h, bias=False)
        self.v_proj = nn.Linear(h, h, bias=False)
        self.o_proj = nn.Linear(h, h, bias=False)
        self.gate_up = nn.Linear(h, 2 * config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, h, bias=False)
        self.input_layernorm = LlamaRMSNorm(h, config.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(h, config.rms_norm_eps)

    def forward(self, hidden_states, position_embeddings, attention_mask, past_key_values, cache_position):
        bsz, q_len, _ = hidden_states.shape
        x = self.input_layernorm(hidden_states)
        q = self.q_proj(x).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        cos, sin = position_embeddings
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        k, v = past_key_values.update(k, v, self.layer_idx, cache_position)
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=attention_mask)
        hidden_states = hidden_states + self.o_proj(attn.transpose(1, 2).reshape(bsz, q_len, -1))
        gate, up = self.gate_up(self.post_attention_layernorm(hidden_states)).chunk(2, -1)
        return hidden_states + self.down_proj(F.silu(gate) * up)


class LlamaForCausalLM(nn.Module):
    def __init__(self, config: LlamaConfig):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([LlamaDecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.norm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = LlamaRotaryEmbedding(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, input_ids, position_ids, cache_position, past_key_values: StaticCache):
        hidden_states = self.embed_tokens(input_ids)
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        key_positions = torch.arange(past_key_values.max_cache_len, device=input_ids.device)
        attention_mask = (key_positions[None, :] <= cache_position[:, None])[None, None]
        for layer in self.layers:
            hidden_states = layer(hidden_states, position_embeddings, attention_mask, past_key_values, cache_position)
        return self.lm_head(self.norm(hidden_states[:, -1:]))


class GraphedDecoder:
    """Replays single-token decode steps from one captured CUDA graph."""

    def __init__(self, model: LlamaForCausalLM, cache: StaticCache, batch_size: int, use_cuda_graph: bool = True):
        self.model = model
        self.cache = cache
        self.use_cuda_graph = use_cuda_graph
        device = model.lm_head.weight.device
        self.static_input_ids = torch.zeros(batch_size, 1, dtype=torch.long, device=device)
        self.static_position_ids = torch.zeros(batch_size, 1, dtype=torch.long, device=device)
        self.static_cache_position = torch.zeros(1, dtype=torch.long, device=device)
        self.graph: Optional[torch.cuda.CUDAGraph] = None
        self.static_logits = None

    def _step(self):
        return self.model(self.static_input_ids, self.static_position_ids, self.static_cache_position, self.cache)

    def capture(self):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                self._step()
        torch.cuda.current_stream().wait_stream(s)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.static_logits = self._step()

    def __call__(self, input_ids, position: int):
        self.model.rotary_emb.dynamic_frequency_update(position + 1, input_ids.device)
        self.static_input_ids.copy_(input_ids)
        self.static_position_ids.fill_(position)
        self.static_cache_position.fill_(position)
        if not self.use_cuda_graph:
            return self._step()
        if self.graph is None:
            self.capture()
        self.graph.replay()
        return self.static_logits.clone()


@torch.no_grad()
def generate(model: LlamaForCausalLM, input_ids: torch.Tensor, max_new_tokens: int, use_cuda_graph: bool):
    bsz, prompt_len = input_ids.shape
    cache = StaticCache(model.config, bsz, prompt_len + max_new_tokens, input_ids.device)
    model.rotary_emb.dynamic_frequency_update(prompt_len, input_ids.device)
    cache_position = torch.arange(prompt_len, device=input_ids.device)
    logits = model(input_ids, cache_position[None].expand(bsz, -1), cache_position, cache)
    decoder = GraphedDecoder(model, cache, bsz, use_cuda_graph=use_cuda_graph)
    next_token = logits[:, -1].argmax(-1, keepdim=True)
    tokens, all_logits = [next_token], [logits[:, -1]]
    for pos in range(prompt_len, prompt_len + max_new_tokens - 1):
        logits = decoder(next_token, pos)
        next_token = logits[:, -1].argmax(-1, keepdim=True)
        tokens.append(next_token)
        all_logits.append(logits[:, -1])
    return torch.cat(tokens, 1), torch.stack(all_logits)


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    results = []
    for use_cuda_graph in (False, True):
        torch.manual_seed(0)
        model = LlamaForCausalLM(LlamaConfig()).cuda().eval()
        prompt = torch.randint(0, 96, (2, 6), generator=torch.Generator().manual_seed(3)).cuda()
        results.append(generate(model, prompt, max_new_tokens=14, use_cuda_graph=use_cuda_graph))
    (tok_e, log_e), (tok_g, log_g) = results
    ok = torch.equal(tok_e, tok_g) and torch.allclose(log_e, log_g, rtol=1e-4, atol=1e-4)
    print("VERDICT", "OK" if ok else "HAZARD")


if __name__ == "__main__":
    main()
