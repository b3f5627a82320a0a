"""CPython's syntax check of the files the engine never parses, in other processes."""
from __future__ import annotations

from pathlib import Path

from cglint import source


def _syntax_error_batch(paths: list[Path]) -> list[tuple[Path, source.SourceError]]:
    found = []
    for path in paths:
        loaded = source.load(path, str(path))
        if isinstance(loaded, source.SourceFile):
            error = source.syntax_check(loaded.text)
            if error is not None:
                found.append((path, error))
    return found


# Starting worker processes costs more than checking a few dozen files here.
_FILES_WORTH_A_POOL = 64
# Small batches: whatever the workers have not started when the engine is done, this
# process checks itself.
_BATCH = 32


class SyntaxChecks:
    """Syntax errors (CG002) of files never parsed with libcst: in worker processes when
    `jobs` > 1, while this process runs the engine."""

    def __init__(self, texts: dict[Path, str], jobs: int):
        self._texts = texts
        self._futures: list = []
        self._batches: list = []
        self._pool = None
        paths = sorted(texts)
        if jobs > 1 and len(paths) >= _FILES_WORTH_A_POOL:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
            self._pool = ProcessPoolExecutor(max_workers=jobs - 1, mp_context=context)
            self._batches = [paths[i : i + _BATCH] for i in range(0, len(paths), _BATCH)]
            self._futures = [self._pool.submit(_syntax_error_batch, batch) for batch in self._batches]

    def results(self, exclude: set[Path]) -> list[tuple[Path, source.SourceError]]:
        if self._pool is not None:
            left = [batch for batch, future in zip(self._batches, self._futures) if future.cancel()]
            pairs = [pair for future in self._futures if not future.cancelled() for pair in future.result()]
            pairs += [(p, e) for batch in left for p in batch if (e := source.syntax_check(self._texts[p]))]
            self._pool.shutdown()
        else:
            pairs = [(p, e) for p, t in self._texts.items() if p.resolve() not in exclude and (e := source.syntax_check(t))]
        return [(p, e) for p, e in sorted(pairs, key=lambda pair: str(pair[0])) if p.resolve() not in exclude]
