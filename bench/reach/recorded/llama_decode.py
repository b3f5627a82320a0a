"""One decode step of transformers' Llama (random weights, small config) with a static
cache, captured with torch.cuda.graph and replayed: a real PyPI model's capture."""
import torch
from transformers import LlamaConfig, LlamaForCausalLM, StaticCache

torch.manual_seed(0)
config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
model = LlamaForCausalLM(config).cuda().eval()
cache = StaticCache(config=config, max_cache_len=32)
ids = torch.zeros(1, 1, dtype=torch.long, device="cuda")
pos = torch.zeros(1, dtype=torch.long, device="cuda")


def step():
    return model(input_ids=ids, cache_position=pos, past_key_values=cache, use_cache=True).logits


with torch.no_grad():
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        logits = step()
    for t in range(4):
        pos.fill_(t)
        g.replay()
print("replayed", logits.shape)
