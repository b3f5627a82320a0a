"""CG958: Captures graphs in a loop and binds each one's output to the same name, so only the last graph's output is kept."""
# cglint: skip-file
from _harness import *

SEVERITY = "warning"
MEASURE = "max abs difference between what the code reads after replaying the bs=4 graph and eager (control: outputs kept per graph)"


def hazard():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64)).to(DEV)
    static_x = torch.zeros(8, 64, device=DEV)
    with torch.no_grad():
        side_warmup(lambda: model(static_x))
        phase("capture")
        pool = torch.cuda.graph_pool_handle()
        graphs, outputs = {}, {}
        for bs in (8, 4, 2):  # the hazard: one name for every graph's output
            graphs[bs] = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graphs[bs], pool=pool):
                static_out = model(static_x[:bs])
        kept_graphs = {}
        for bs in (8, 4, 2):  # the control: each graph's output kept with it
            kept_graphs[bs] = torch.cuda.CUDAGraph()
            with torch.cuda.graph(kept_graphs[bs], pool=pool):
                outputs[bs] = model(static_x[:bs])
        torch.cuda.synchronize()
        phase("replay")
        x = torch.randn(4, 64, device=DEV)
        static_x[:4].copy_(x)
        graphs[4].replay()
        read = static_out.clone()  # what the code reads: the last capture's (bs=2) output
        kept_graphs[4].replay()
        control = outputs[4].clone()
        torch.cuda.synchronize()
        phase("eager")
        expected = model(x)
    return {
        "divergence": maxdiff(read, expected[: read.shape[0]]),
        "control": maxdiff(control, expected),
    }
