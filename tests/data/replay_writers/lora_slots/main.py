"""vLLM-style LoRA slots: adapter weights are copied into fixed device slots (correctly), but the
per-slot scaling is a Python list entry that activating an adapter rewrites between replays."""
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
SLOTS, RANK, DIM = 2, 2, 8


class LoRAModelManager:
    def __init__(self):
        self.lora_a = torch.zeros(SLOTS, RANK, DIM, device=DEVICE)
        self.lora_b = torch.zeros(SLOTS, DIM, RANK, device=DEVICE)
        self.scalings = [0.0] * SLOTS
        self.index_to_id = [None] * SLOTS

    def activate_adapter(self, lora_id, index, a, b, scaling):
        self.lora_a[index].copy_(a)
        self.lora_b[index].copy_(b)
        self.scalings[index] = scaling  # write
        self.index_to_id[index] = lora_id


class LinearWithLoRA(torch.nn.Module):
    def __init__(self, manager):
        super().__init__()
        self.base = torch.nn.Linear(DIM, DIM)
        self.manager = manager

    def forward(self, x, slot_ids):
        out = self.base(x)
        for index in range(SLOTS):
            scale = self.manager.scalings[index]  # read
            chosen = (slot_ids == index).to(x.dtype)[:, None]
            out = out + scale * chosen * (x @ self.manager.lora_a[index].t() @ self.manager.lora_b[index].t())
        return out


torch.manual_seed(0)
manager = LoRAModelManager()
layer = LinearWithLoRA(manager).to(DEVICE)
manager.activate_adapter("a", 0, torch.randn(RANK, DIM), torch.randn(DIM, RANK), 0.5)
static_x, static_ids = torch.randn(4, DIM, device=DEVICE), torch.tensor([0, 0, 1, 1], device=DEVICE)
layer(static_x, static_ids)
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    static_out = layer(static_x, static_ids)
manager.activate_adapter("b", 1, torch.randn(RANK, DIM), torch.randn(DIM, RANK), 2.0)
static_x.copy_(torch.randn(4, DIM, device=DEVICE))
graph.replay()
same = torch.allclose(static_out, layer(static_x, static_ids), atol=1e-5)
print("VERDICT MATCHES" if same else "VERDICT DIVERGES")
