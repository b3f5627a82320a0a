"""The expression helpers the rules share."""
from __future__ import annotations

import libcst as cst

from cglint.engine.syntax import code_of, reads


def _reads(text: str, *opened: type) -> list[str]:
    return [code_of(read) for read in reads(cst.parse_expression(text), lambda node: isinstance(node, opened))]


def test_reads_follow_only_the_operators_a_rule_opens_in_source_order():
    condition = "self.step % self.log_every == 0 and not cfg.debug"
    assert _reads(condition) == []  # nothing opened, and the whole is no name
    assert _reads("self.step % self.log_every == 0", cst.Comparison, cst.BinaryOperation) == ["self.step", "self.log_every"]
    size = "min(self.cur_len + extra, cache[layer].size(0))"
    assert _reads(size, cst.BinaryOperation) == []
    assert _reads(size, cst.Call, cst.BinaryOperation, cst.Subscript) == ["min", "self.cur_len", "extra", "cache[layer].size"]


def test_reads_through_attributes_give_the_roots_of_a_call_chain():
    roots = _reads("self.runner.layers[i](x, scale=alpha).float()", cst.Attribute, cst.Call, cst.Subscript)
    assert roots == ["self", "i", "x", "alpha"]
