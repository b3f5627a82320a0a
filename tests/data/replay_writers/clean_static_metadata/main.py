"""Twin: the next step's metadata is copied field by field into the captured dataclass's
tensors; `self.input_buffers = {...}` binds the container once, before the capture."""
import dataclasses

import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@dataclasses.dataclass
class AttentionMetadata:
    slot_mapping: torch.Tensor
    seq_lens: torch.Tensor


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(8, 8)
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, input_ids, attn_metadata):
        h = self.proj(self.embed(input_ids))
        return h * attn_metadata.seq_lens[:, None] + attn_metadata.slot_mapping[:, None]


class CUDAGraphRunner:
    def __init__(self, model):
        self.model = model
        self.input_buffers = {}

    def capture(self, input_ids, attn_metadata):
        self.input_buffers = {"input_ids": input_ids, "attn_metadata": attn_metadata}
        self.model(**self.input_buffers)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.output = self.model(**self.input_buffers)

    def forward(self, input_ids, attn_metadata):
        self.input_buffers["input_ids"].copy_(input_ids)
        captured = self.input_buffers["attn_metadata"]
        for field in dataclasses.fields(captured):
            getattr(captured, field.name).copy_(getattr(attn_metadata, field.name))
        self.graph.replay()
        return self.output


def metadata(step):
    return AttentionMetadata(torch.full((4,), float(step), device=DEVICE), torch.full((4,), step + 1.0, device=DEVICE))


torch.manual_seed(0)
model = Model().to(DEVICE)
runner = CUDAGraphRunner(model)
runner.capture(torch.zeros(4, dtype=torch.long, device=DEVICE), metadata(0))
same = True
for step in range(1, 3):
    ids = torch.randint(0, 8, (4,), device=DEVICE)
    same &= torch.allclose(runner.forward(ids, metadata(step)), model(ids, metadata(step)))
print("VERDICT MATCHES" if same else "VERDICT DIVERGES")
