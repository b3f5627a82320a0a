"""Time limits the test suite does not assert: large files and the pre-commit hook's run.

Run on demand (not part of the test suite; tests/test_hostile_inputs.py checks what these
runs find, this script how long they take):

    python bench/sizes.py

Each case is one whole `cglint check --no-cache` process, as pre-commit or CI starts it,
on a scratch copy. The bounds are the ones a pathological regression would cross on a
loaded 2-core CI machine, not targets: the README's speed table gives the real figures.
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CAPTURE = "import torch\ng = torch.cuda.CUDAGraph()\nx = torch.zeros(4, device='cuda')\nwith torch.cuda.graph(g):\n"


def _plain_50000_lines(folder: Path) -> list[Path]:
    path = folder / "big.py"
    path.write_text("".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(25_000)))
    return [path]


def _capture_after_50000_lines(folder: Path) -> list[Path]:
    path = folder / "big.py"
    body = "".join(f"v{i} = {i}\n" for i in range(49_990))
    path.write_text(CAPTURE.replace("with", body + "with") + "    y = x.item()\n")
    return [path]


def _hook_on_three_files(folder: Path) -> list[Path]:
    return [REPO / "fixtures/training_step/train.py", REPO / "fixtures/decode_loop/generate.py", REPO / "fixtures/clean_project/train.py"]


# (name, files to check, expected exit status, bound in seconds)
CASES = [
    ("50,000 lines, no capture", _plain_50000_lines, 0, 30),
    ("50,000 lines, a capture at the end", _capture_after_50000_lines, 1, 60),  # 70 s before positions were resolved per statement
    ("pre-commit hook on three fixture files", _hook_on_three_files, 1, 10),  # well under a second on a laptop
]


def main() -> int:
    failed = 0
    print("| case | seconds | bound |\n|---|---|---|")
    for name, make, status, bound in CASES:
        with tempfile.TemporaryDirectory() as scratch:
            files = make(Path(scratch))
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "cglint", "check", "--no-cache", *map(str, files)], cwd=scratch, capture_output=True, text=True)
            elapsed = time.perf_counter() - start
        ok = done.returncode == status and elapsed < bound
        failed += not ok
        print(f"| {name} | {elapsed:.2f} | {bound}{'' if ok else ' (FAILED: exit ' + str(done.returncode) + ')'} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
