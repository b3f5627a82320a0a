"""A decode-step graph runner in the style of SGLang's CudaGraphRunner: the logits processor
reads the shared generation config while the step is captured."""
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


class LogitsProcessor(torch.nn.Module):
    def __init__(self, gen_config):
        super().__init__()
        self.gen_config = gen_config

    def forward(self, logits):
        return torch.softmax(logits / self.gen_config.temperature, dim=-1)  # read


class GraphRunner:
    def __init__(self, head, gen_config):
        self.head = head
        self.processor = LogitsProcessor(gen_config)
        self.static_hidden = torch.zeros(4, 16, device=DEVICE)
        self.graph = None

    def forward_eager(self, hidden):
        return self.processor(self.head(hidden))

    def capture(self):
        self.forward_eager(self.static_hidden)  # warmup
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.static_probs = self.forward_eager(self.static_hidden)

    def replay(self, hidden):
        self.static_hidden.copy_(hidden)
        self.graph.replay()
        return self.static_probs.clone()
