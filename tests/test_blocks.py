"""Statement positions (cglint.engine.blocks): what runs before and after a statement, and
what encloses it; rules that look for a stream's fork and join or a capture's warmup use this."""
from __future__ import annotations

import libcst as cst

from cglint.engine.blocks import Blocks
from cglint.engine.syntax import code_of, descendants

SOURCE = """
a = 1
with g:
    b = 2
    if x:
        c = 3
    elif y:
        d = 4
    f = 6
g.capture_begin()
h = 7
for i in range(3):
    j = 8
"""


def _setup():
    module = cst.parse_module(SOURCE)
    blocks = Blocks(list(module.body))
    lines = {code_of(n): n for n in descendants(module) if isinstance(n, cst.SimpleStatementLine)}
    return module, blocks, lines


def test_before_walks_out_of_blocks_and_skips_sibling_branches():
    _, blocks, lines = _setup()
    assert [code_of(s) for s in blocks.before(lines["d = 4"])] == ["b = 2", "a = 1"]


def test_after_continues_past_the_enclosing_statements():
    _, blocks, lines = _setup()
    following = [code_of(s, 200) for s in blocks.after(lines["b = 2"])]
    assert following[1:4] == ["f = 6", "g.capture_begin()", "h = 7"] and following[0].startswith("if x:")


def test_enclosing_lists_compound_statements_innermost_first():
    module, blocks, lines = _setup()
    kinds = [type(s).__name__ for s in blocks.enclosing(lines["d = 4"])]
    assert kinds == ["If", "If", "With"]
    assert [type(s).__name__ for s in blocks.enclosing(lines["j = 8"])] == ["For"]


def test_stop_limits_before_to_a_region():
    module, blocks, lines = _setup()
    with_node = module.body[1]
    assert [code_of(s) for s in blocks.before(lines["f = 6"], stop=with_node)] == ["if x: c = 3 elif y: d = 4", "b = 2"]
    begin = next(n for n in descendants(module) if isinstance(n, cst.Call) and code_of(n) == "g.capture_begin()")
    assert [code_of(s) for s in blocks.before(lines["h = 7"], stop=begin)] == []
