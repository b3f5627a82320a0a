"""Line and column of a module's nodes, resolved lazily.

Positions come from generating code, and a 50,000-line module should not be generated
whole for one finding: they are resolved per top-level statement that has something to
report. A module's nodes live in its pieces (its skeleton and each function parsed since,
see definitions.Piece); CPython's parser gives each top-level statement's first line,
libcst gives positions inside the statement. Where the first lines are unknown (syntax
newer than the running Python), the whole module is resolved once instead.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from collections.abc import Mapping

    import libcst as cst
    from libcst.metadata import CodeRange

    from cglint.engine.definitions import ModuleInfo, Piece


class Positions:
    """Positions of the nodes of any module, memoised per piece."""

    def __init__(self) -> None:
        self._pieces: dict[int, PiecePositions] = {}

    def of(self, module: "ModuleInfo", node: "cst.CSTNode"):
        # Functions first: they are small, hold most findings, and the skeleton is indexed last.
        for piece in [*module.pieces[1:], *module.pieces[:1]]:
            if id(piece) not in self._pieces:
                self._pieces[id(piece)] = PiecePositions(piece)
            found = self._pieces[id(piece)].position(node)
            if found is not None:
                return found
        return None


class PiecePositions:
    def __init__(self, piece: "Piece") -> None:
        self._piece = piece
        self._owner: dict[int, int] = {}  # id(node) -> index of its top-level statement
        self._indexed = 0
        self._resolved: dict[int, tuple[int, Mapping[cst.CSTNode, CodeRange]]] = {}  # statement -> (line offset, positions)
        self._whole: Optional[Mapping[cst.CSTNode, CodeRange]] = None

    def _statement_of(self, node: "cst.CSTNode") -> Optional[int]:
        from cglint.engine.syntax import children

        body = self._piece.tree.body
        while id(node) not in self._owner and self._indexed < len(body):
            stack: list[cst.CSTNode]
            index, stack = self._indexed, [body[self._indexed]]
            while stack:
                current = stack.pop()
                self._owner[id(current)] = index
                stack.extend(children(current))
            self._indexed += 1
        return self._owner.get(id(node))

    def position(self, node: "cst.CSTNode"):
        from libcst.metadata import CodePosition, CodeRange, MetadataWrapper, PositionProvider

        if self._piece.starts is None:
            if self._whole is None:
                self._whole = MetadataWrapper(self._piece.tree, unsafe_skip_copy=True).resolve(PositionProvider)
            return self._whole.get(node)
        index = self._statement_of(node)
        if index is None:
            return None
        if index not in self._resolved:
            statement = self._piece.tree.body[index]
            alone = self._piece.tree.with_changes(body=[statement], header=[], footer=[])
            positions = MetadataWrapper(alone, unsafe_skip_copy=True).resolve(PositionProvider)
            self._resolved[index] = (self._piece.starts[index] - positions[statement].start.line, positions)
        offset, positions = self._resolved[index]
        span = positions.get(node)
        if span is None:
            return None
        start, end = span.start.line + offset, span.end.line + offset
        if self._piece.start_lines is not None and self._piece.end_lines is not None:  # a skeleton, shorter than the source
            start, end = self._piece.start_lines[start - 1], self._piece.end_lines[end - 1]
        return CodeRange(CodePosition(start, span.start.column), CodePosition(end, span.end.column))
