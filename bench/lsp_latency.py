"""Latency of `cglint server`: didChange -> publishDiagnostics for an edited file once a
large project is indexed.

Run on demand (not part of the test suite; needs pygls):

    python bench/lsp_latency.py [torch] [generated] [--edits 20]

`torch` is the installed package's Python sources (copied to a scratch folder, as in
bench.py); `generated` is a project of 2,000 files written here: 100 scripts that capture a
model from another module, 100 model modules with hazards those captures reach, and 1,800
modules of plain code. The server is a real process driven over stdio; the time measured
is from sending didChange to receiving the file's diagnostics, with the server's debounce
set to 0 (the editor adds the debounce, 300 ms by default, after the last keystroke).
Each tree is indexed twice: cold (empty cache) and warm (a new server, cache filled).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lsprotocol import types
from pygls.lsp.client import LanguageClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import tree_of  # bench/bench.py

MODEL = '''\
import torch
from torch import nn


class Block{i}(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.steps = 0

    def forward(self, x):
        h = self.proj(x)
        if h.sum() > 0:
            h = h * 2
        return h / h.abs().max().item()
'''
SCRIPT = '''\
import torch

from pkg.models.block{i} import Block{i}


def build(static_x):
    model = Block{i}(64).cuda()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            model(static_x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = model(static_x)
    return graph, static_y
'''
PLAIN = "".join(f"\n\ndef helper_{{i}}_{n}(values, scale=1.0):\n    total = 0.0\n    for v in values:\n        total += v * scale + {n}\n    return total\n" for n in range(15))


def generated(scratch: Path) -> tuple[Path, list[Path]]:
    root = scratch / "generated"
    for folder in ("pkg", "pkg/models", "pkg/scripts", "pkg/util"):
        (root / folder).mkdir(parents=True)
        (root / folder / "__init__.py").write_text("")
    for i in range(100):
        (root / f"pkg/models/block{i}.py").write_text(MODEL.format(i=i))
        (root / f"pkg/scripts/run{i}.py").write_text(SCRIPT.format(i=i))
    for i in range(1800):
        (root / f"pkg/util/u{i}.py").write_text(f'"""Utility {i}."""' + PLAIN.format(i=i))
    return root, [root / "pkg/models/block50.py", root / "pkg/scripts/run50.py", root / "pkg/util/u900.py"]


def torch_tree(scratch: Path) -> tuple[Path, list[Path]]:
    root = tree_of("torch", scratch)
    return root, [root / "cuda/graphs.py", root / "nn/functional.py", root / "optim/adam.py"]


class Session:
    """A server process and the diagnostics it publishes, by (uri, version)."""

    def __init__(self) -> None:
        self.client = LanguageClient("cglint-bench", "1")
        self.arrived: dict[tuple[str, int], tuple[float, int]] = {}
        self.event = asyncio.Event()

        @self.client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def published(params: types.PublishDiagnosticsParams) -> None:
            self.arrived[(params.uri, params.version)] = (time.perf_counter(), len(params.diagnostics))
            self.event.set()

    async def start(self, root: Path) -> None:
        # Started outside the tree: `python -m` puts its folder first on sys.path, where
        # torch's own types.py would shadow the standard library's (the server moves to the
        # workspace root it is given).
        await self.client.start_io(sys.executable, "-m", "cglint", "server")
        params = types.InitializeParams(capabilities=types.ClientCapabilities(), root_uri=root.as_uri(), initialization_options={"debounceMs": 0})
        await self.client.initialize_async(params)
        self.client.initialized(types.InitializedParams())

    async def wait(self, uri: str, version: int) -> tuple[float, int]:
        while (uri, version) not in self.arrived:
            self.event.clear()
            await asyncio.wait_for(self.event.wait(), 600)
        return self.arrived[(uri, version)]

    async def open(self, path: Path) -> tuple[float, int]:
        item = types.TextDocumentItem(uri=path.as_uri(), language_id="python", version=1, text=path.read_text("utf-8"))
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(item))
        return await self.wait(item.uri, 1)

    async def change(self, path: Path, version: int, text: str) -> tuple[float, int]:
        sent = time.perf_counter()
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(uri=path.as_uri(), version=version),
            [types.TextDocumentContentChangeWholeDocument(text=text)],
        ))
        arrived, count = await self.wait(path.as_uri(), version)
        return arrived - sent, count

    async def stop(self) -> None:
        await self.client.shutdown_async(None)
        self.client.exit(None)
        await self.client.stop()


async def measure(name: str, root: Path, files: list[Path], edits: int) -> list[str]:
    rows = []
    for state in ("cold", "warm"):
        session = Session()
        started = time.perf_counter()
        await session.start(root)
        arrived, _ = await session.open(files[0])  # published once the project is indexed
        index_seconds = arrived - started
        if state == "cold":
            rows.append(f"| {name} | index, cold cache | {index_seconds:.2f} s |  |")
            await session.stop()
            continue
        rows.append(f"| {name} | index, warm cache | {index_seconds:.2f} s |  |")
        for path in files:
            if path != files[0]:
                await session.open(path)
            original = path.read_text("utf-8")
            times, counts = [], set()
            for n in range(edits):
                # Alternate an edit inside the file (a comment on its last line) with the original.
                text = original + f"# edit {n}\n" if n % 2 == 0 else original
                seconds, count = await session.change(path, n + 2, text)
                times.append(seconds)
                counts.add(count)
            relative = path.relative_to(root.parent).as_posix()
            rows.append(
                f"| {name} | didChange -> diagnostics, `{relative}` ({', '.join(map(str, sorted(counts)))} diagnostics) "
                f"| median {statistics.median(times) * 1000:.0f} ms | max {max(times) * 1000:.0f} ms |"
            )
        await session.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trees", nargs="*", default=["generated", "torch"], choices=["generated", "torch"])
    parser.add_argument("--edits", type=int, default=20, help="edits timed per file")
    args = parser.parse_args()
    print(f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}\n")
    print("| tree | measured | time | |\n|---|---|---|---|")
    for name in args.trees:
        with tempfile.TemporaryDirectory() as scratch:
            root, files = (generated if name == "generated" else torch_tree)(Path(scratch))
            for row in asyncio.run(measure(name, root, files, args.edits)):
                print(row, flush=True)


if __name__ == "__main__":
    main()
