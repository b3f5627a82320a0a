import torch

from .lora.lora_config import LoRAAdapter
from .model_executor.forward_batch_info import ForwardBatch
from .model_executor.model_runner import ModelRunner

ADAPTERS = [
    ("sql-r4", 4, 8.0),
    ("chat-r8", 8, 16.0),
    ("math-r2", 2, 32.0),
    ("code-r8", 8, 4.0),
]

SCHEDULE = [
    ["sql-r4", "chat-r8", None, "sql-r4"],
    ["math-r2", None, "math-r2", "sql-r4"],
    ["code-r8", "chat-r8", "code-r8", None],
    ["sql-r4", "math-r2", None, "sql-r4"],
]


def serve(disable_cuda_graph: bool):
    runner = ModelRunner(disable_cuda_graph=disable_cuda_graph)
    runner.load_lora_adapters(
        [LoRAAdapter.random(uid, 32, 32, r, alpha, seed=i) for i, (uid, r, alpha) in enumerate(ADAPTERS)]
    )
    g = torch.Generator().manual_seed(5)
    outputs = []
    for lora_uids in SCHEDULE:
        input_ids = torch.randint(0, 64, (4, 8), generator=g).cuda()
        outputs.append(runner.forward(ForwardBatch(input_ids=input_ids, lora_uids=lora_uids)))
    return outputs


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    eager = serve(disable_cuda_graph=True)
    graphed = serve(disable_cuda_graph=False)
    ok = all(torch.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(graphed, eager))
    print("VERDICT", "OK" if ok else "HAZARD")


if __name__ == "__main__":
    main()
