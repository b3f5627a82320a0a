"""The README's example outputs, produced by running its commands on the bundled fixtures.

A block to fill is a ```text fence right after a marker line
`<!-- readme-example: COMMAND | SHOWN -->`, where SHOWN is `summary` (the summary line only)
or the codes of the findings to show (each such finding, then the summary line). The command
runs as a user runs it, from the repository root, without colour and without the cache.

`python -m tests.readme_examples` rewrites the blocks; tests/test_readme.py fails when one is stale.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MARKED = re.compile(r"(<!-- readme-example: (?P<command>[^|]+?) \| (?P<shown>[^>]+?) -->\n```text\n)(?P<body>.*?)(```)", re.S)


def run(command: str) -> tuple[int, str]:
    """Run a `cglint ...` command line from the repository root: (exit status, stdout)."""
    argv = shlex.split(command)
    assert argv[0] == "cglint", command
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "CGLINT_OUTPUT_FORMAT")}
    env["NO_COLOR"] = "1"
    done = subprocess.run([sys.executable, "-m", "cglint", *argv[1:2], "--no-cache", *argv[2:]],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    return done.returncode, done.stdout


def excerpt(output: str, shown: str) -> str:
    """The findings named by `shown` (codes, or `summary` for none) and the summary line."""
    blocks = output.rstrip("\n").split("\n\n")
    summary = blocks[-1]
    codes = [] if shown == "summary" else shown.split()
    kept = [b for b in blocks[:-1] if any(re.match(rf"\S+:\d+:\d+: {code} \[", b) for code in codes)]
    assert len(kept) >= len(codes), f"the output has no finding {shown!r}"
    return "\n\n".join([*kept, summary]) + "\n"


def examples(text: str) -> list[tuple[str, str, str]]:
    """(command, shown, current body) of every marked block."""
    return [(m["command"], m["shown"], m["body"]) for m in MARKED.finditer(text)]


def render(text: str) -> str:
    """The README with every marked block filled from its command's output."""
    return MARKED.sub(lambda m: m[1] + excerpt(run(m["command"])[1], m["shown"]) + m[5], text)


if __name__ == "__main__":
    README.write_text(render(README.read_text("utf-8")), "utf-8")
