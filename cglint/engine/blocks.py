"""Where a statement sits in its function: the statements before and after it, and the
compound statements around it.

Rules that judge a construct by its neighbours ask this: a side stream must be
forked before `with torch.cuda.stream(s):` and joined after it, a capture needs a
warmup before it, a capture inside a `for` loop is one of several. Built once per
function, on the first question, from the function's own statements (nested defs
are not entered).
"""
from __future__ import annotations

from typing import Iterator, Optional

import libcst as cst

from cglint.engine.syntax import children, descendants

_STATEMENTS = (cst.SimpleStatementLine, cst.BaseCompoundStatement)


class Blocks:
    def __init__(self, body: list[cst.CSTNode]):
        # statement id -> (the block holding it, its index there, the compound statement owning that block)
        self._place: dict[int, tuple[Optional[list], int, Optional[cst.CSTNode]]] = {}
        self._statement_of: dict[int, cst.CSTNode] = {}  # any node id -> innermost statement holding it
        self._block(list(body), None)

    def _block(self, statements: list, owner: Optional[cst.CSTNode]) -> None:
        for index, stmt in enumerate(statements):
            self._place[id(stmt)] = (statements, index, owner)
            self._statement(stmt)

    def _statement(self, stmt: cst.CSTNode) -> None:
        self._statement_of[id(stmt)] = stmt
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            return
        for child in children(stmt):
            self._part(child, stmt)

    def _part(self, node: cst.CSTNode, stmt: cst.CSTNode) -> None:
        """Map a child of `stmt`: suites open blocks, `elif` chains stay under their `if`."""
        if isinstance(node, (cst.IndentedBlock, cst.SimpleStatementSuite)):
            self._block(list(node.body), stmt)
        elif isinstance(node, cst.If):  # an elif
            self._place[id(node)] = (None, 0, stmt)
            self._statement(node)
        elif isinstance(node, (cst.Else, cst.ExceptHandler, cst.ExceptStarHandler, cst.Finally, cst.MatchCase)):
            for child in children(node):
                self._part(child, stmt)
        else:
            self._statement_of[id(node)] = stmt
            for inner in descendants(node):
                self._statement_of.setdefault(id(inner), stmt)

    def statement(self, node: cst.CSTNode) -> Optional[cst.CSTNode]:
        """The innermost statement that holds `node` (a statement is its own)."""
        return self._statement_of.get(id(node))

    def enclosing(self, node: cst.CSTNode) -> list[cst.CSTNode]:
        """Compound statements around `node`, innermost first."""
        found = []
        stmt = self.statement(node)
        while stmt is not None and id(stmt) in self._place:
            owner = self._place[id(stmt)][2]
            if owner is None:
                break
            found.append(owner)
            stmt = owner
        return found

    def before(self, node: cst.CSTNode, stop: Optional[cst.CSTNode] = None) -> Iterator[cst.CSTNode]:
        """Statements that run before `node`'s statement: nearest first, then outward.

        With `stop`, the walk outward ends at that compound statement (its body is the
        limit) or, when `stop` is a statement of a block, just after it.
        """
        yield from self._siblings(node, stop, -1)

    def after(self, node: cst.CSTNode, stop: Optional[cst.CSTNode] = None) -> Iterator[cst.CSTNode]:
        """Statements that run after `node`'s statement: nearest first, then outward."""
        yield from self._siblings(node, stop, 1)

    def _siblings(self, node: cst.CSTNode, stop: Optional[cst.CSTNode], step: int) -> Iterator[cst.CSTNode]:
        stmt = self.statement(node)
        stop_stmt = self.statement(stop) if stop is not None else None
        while stmt is not None and id(stmt) in self._place:
            block, index, owner = self._place[id(stmt)]
            if block is not None:
                limit = block.index(stop_stmt) if stop_stmt is not None and stop_stmt in block and stop is not owner else None
                indexes = range(index - 1, -1, -1) if step < 0 else range(index + 1, len(block))
                for i in indexes:
                    if limit is not None and (i <= limit if step < 0 else False):
                        return
                    yield block[i]
                if limit is not None:
                    return
            if owner is None or owner is stop:
                return
            stmt = owner
