"""What a code object reads from long-lived Python state, found in its bytecode.

A read is a chain rooted at a local (`self`, an argument), a global, a closure cell or
`super()`, followed by attribute loads and constant subscripts: `self.temperature`,
`self.cfg["scale"]`, `config.GUIDANCE`, `len(self.buffer)`, `super().factor`. A chain that is
called (`self.act(x)`) is a read too: a functools.partial there freezes its arguments. The bytecode also says what consumes the value: a
conditional jump (a branch), `GET_ITER` (a loop bound), `BUILD_SLICE` (a slice), or
anything else (an operand of tensor work). That is followed with a small stack model over
the instructions after the chain; an instruction it does not model ends the walk and the
read counts as a plain value.

Counters (`self.pos += 1`, `state.step = state.step + 1`, `STEP += 1`) are stores of a
chain to itself: `counters()` finds them, for the collector to compare the value before the
capture ran the line with the value after it.

Plans are computed once per code object and cached; they are pure data (no values), so
the guard collector only evaluates them on the frames a capture ran.
"""
from __future__ import annotations

import dis
import functools
import operator
import sys
from dataclasses import dataclass
from types import CodeType
from typing import Any, Optional

from cglint.verify.guards import bytecode

VALUE, BRANCH, SLICE = "value", "branch", "slice"
_PY312 = sys.version_info >= (3, 12)
# (pops, pushes) of the instructions the use walk understands; others end it.
_STACK = {
    "LOAD_FAST": (0, 1), "LOAD_FAST_CHECK": (0, 1), "LOAD_FAST_BORROW": (0, 1), "LOAD_CONST": (0, 1),
    "LOAD_SMALL_INT": (0, 1), "LOAD_DEREF": (0, 1), "LOAD_NAME": (0, 1), "PUSH_NULL": (0, 1),
    "BINARY_OP": (2, 1), "COMPARE_OP": (2, 1), "IS_OP": (2, 1), "CONTAINS_OP": (2, 1), "BINARY_SUBSCR": (2, 1),
    "UNARY_NEGATIVE": (1, 1), "UNARY_NOT": (1, 1), "UNARY_INVERT": (1, 1), "UNARY_POSITIVE": (1, 1),
    "TO_BOOL": (1, 1), "PRECALL": (0, 0), "KW_NAMES": (0, 0), "NOP": (0, 0), "RESUME": (0, 0), "CACHE": (0, 0),
}


@dataclass(frozen=True)
class ReadSite:
    kind: str  # "local", "global", "name" (module-level code), "deref" (a free variable) or "super"
    root: str
    steps: tuple[tuple[str, Any], ...]  # ("attr", name) | ("item", constant) | ("len", None)
    use: str  # VALUE, BRANCH or SLICE
    line: int
    column: int
    end_line: int
    end_column: int
    offset: int
    # What the code derives from the value before anything else sees it, when that is a test with
    # constants (`x == 0`, `x > 1`, `x is None`, `if x:`): a change that keeps the test's outcome
    # changes nothing the capture computed (see `derive`). Empty when the value itself is used.
    test: tuple = ()

    # Cached on the site (plans live as long as their code): every capture builds guards from the
    # same sites of each layer's forward.
    @functools.cached_property
    def text(self) -> str:
        out = "super()" if self.kind == "super" else self.root
        for step, key in self.steps:
            if step == "attr":
                out += f".{key}"
            elif step == "item":
                out += f"[{key!r}]"
            elif step == "var":
                out += f"[{key}]"
            else:
                out = f"len({out})"
        return out


def _scanned(scan, code: CodeType) -> tuple[ReadSite, ...]:
    try:
        return tuple(scan(code))
    except Exception:  # noqa: BLE001 - bytecode this scanner does not know: no guards, never a crash
        return ()


# Each asked for code objects on every line event while capturing: computed once per code object.
@functools.cache
def plan(code: CodeType) -> tuple[ReadSite, ...]:
    return _scanned(_scan, code)


@functools.cache
def lines(code: CodeType) -> frozenset[int]:
    """The lines of `code` that hold a read."""
    return (frozenset(site.line for site in plan(code)) | frozenset(counter_lines(code)) | frozenset(var_lines(code))
            | frozenset(store_lines(code)))


@functools.cache
def var_sites(code: CodeType) -> tuple[ReadSite, ...]:
    """Reads subscripted by a local (`self.scalings[slot]`, `group[name]`): the last step is ("var", NAME),
    the local that holds the key. The key is known only while the line runs (a loop variable moves on),
    so these are evaluated at their line, not when the frame returns."""
    return _scanned(_scan_var, code)


@functools.cache
def var_lines(code: CodeType) -> dict[int, tuple[ReadSite, ...]]:
    found: dict[int, tuple[ReadSite, ...]] = {}
    for site in var_sites(code):
        found[site.line] = found.get(site.line, ()) + (site,)
    return found


@functools.cache
def counters(code: CodeType) -> tuple[ReadSite, ...]:
    """The counters `code` advances: a chain stored back with a value computed from itself."""
    return _scanned(_scan_counters, code)


@functools.cache
def counter_lines(code: CodeType) -> dict[int, tuple[ReadSite, ...]]:
    """The counters of `code` by line (what a line event evaluates before the line runs)."""
    found: dict[int, tuple[ReadSite, ...]] = {}
    for site in counters(code):
        found[site.line] = found.get(site.line, ()) + (site,)
    return found


@functools.cache
def store_lines(code: CodeType) -> dict[int, tuple[ReadSite, ...]]:
    """The chains `code` stores to (`self.static_out = ...`, `outputs["x"] = ...`), by line: a tensor
    a capture reads back from a chain it stored itself is its own work, not an input it was given."""
    found: dict[int, tuple[ReadSite, ...]] = {}
    for site in _scanned(_scan_stores, code):
        found[site.line] = found.get(site.line, ()) + (site,)
    return found


@functools.cache
def borrowed_locals(code: CodeType) -> frozenset[str]:
    """Locals that `code` binds to an object it looks up in state that outlives the call: the
    loop variables of `for group in self.param_groups:` or `for name, cfg in self.cfg.items()`
    (a comprehension's too), or `group = self.param_groups[0]`, where the iterable or the
    indexed chain starts at an argument, a global or a closure cell. A scheduler rewrites
    `group["lr"]` between replays as it would an argument's entry."""
    return frozenset(loop_sources(code)) | frozenset(_borrowed(code)[1])


@functools.cache
def loop_sources(code: CodeType) -> dict[str, "LoopSource"]:
    """For each borrowed loop variable, where its values come from (see LoopSource): what 3.12's
    inlined comprehensions clear before the frame returns, the guards find again."""
    return _borrowed(code)[0]


@dataclass(frozen=True)
class LoopSource:
    """`for name, cfg in self.cfg.items()`: the chain (`self`, ("attr", "cfg")), the view
    ("items"; "" for the container itself) and the place in an unpacked item (1; None: whole)."""

    kind: str
    root: str
    steps: tuple
    view: str
    place: Optional[int]


@functools.cache
def _borrowed(code: CodeType) -> tuple[dict[str, LoopSource], frozenset[str]]:
    insts = [i for i in dis.get_instructions(code) if i.opname not in ("CACHE", "EXTENDED_ARG")]
    outside = set(code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]) | set(code.co_freevars)
    loops: dict[str, LoopSource] = {}
    indexed: set[str] = set()
    for k, ins in enumerate(insts):
        view = ""
        if ins.opname == "FOR_ITER":
            targets = _loop_stores(insts, k + 1)
            m = k - 1
            while m >= 0 and insts[m].opname in _COMPREHENSION_SETUP:
                m -= 1  # 3.12 inlines comprehensions: their list is built between GET_ITER and FOR_ITER
            if m >= 0 and insts[m].opname == "GET_ITER":
                view, m = _before_view_call(insts, m - 1)
            elif m < 0 or not insts[m].opname.startswith("LOAD_FAST"):
                continue  # else 3.11's comprehension, iterating its argument `.0`
        elif ins.opname.startswith("STORE_FAST") and k >= 2 and insts[k - 1].opname == "BINARY_SUBSCR" and insts[k - 2].opname == "LOAD_CONST":
            targets, m = [ins.argval], k - 3  # `x = CHAIN[0]`
        else:
            continue
        end, steps = m, []
        while m >= 0 and _attr(insts[m]) is not None:
            steps.append(("attr", insts[m].argval))
            m -= 1
        root = _root(insts[m], code) if 0 <= m <= end else None
        if root is None or not (root[0] in ("global", "deref") or (root[0] == "local" and root[1] in outside)):
            continue
        if ins.opname != "FOR_ITER":
            indexed.update(t for t in targets if isinstance(t, str))
            continue
        for place, target in enumerate(targets):
            if isinstance(target, str):
                loops[target] = LoopSource(root[0], root[1], tuple(reversed(steps)), view, place if len(targets) > 1 else None)
    return loops, frozenset(indexed)


_COMPREHENSION_SETUP = frozenset({"LOAD_FAST_AND_CLEAR", "SWAP", "BUILD_LIST", "BUILD_SET", "BUILD_MAP"})
_DICT_VIEWS = frozenset({"items", "values", "keys"})


def _loop_stores(insts: list, k: int) -> list:
    """The names a loop's target binds, from the instruction after FOR_ITER: `x`, or `a, b`."""
    if k < len(insts) and insts[k].opname.startswith("STORE_FAST"):
        return [insts[k].argval]
    if k < len(insts) and insts[k].opname == "UNPACK_SEQUENCE":
        stores = insts[k + 1:k + 1 + (insts[k].arg or 0)]
        return [s.argval for s in stores if s.opname.startswith("STORE_FAST")]
    return []


def _before_view_call(insts: list, m: int) -> tuple[str, int]:
    """Past `.items()`, `.values()` or `.keys()` ending at instruction m (CALL 0, with 3.11's PRECALL,
    after the method load): (the view, the index of the chain's last instruction); ("", m) when
    there is none."""
    j = m
    if j >= 0 and insts[j].opname == "CALL" and not insts[j].arg:
        j -= 1
        if j >= 0 and insts[j].opname == "PRECALL":
            j -= 1
        view = _method(insts[j]) if j >= 0 else None
        if view in _DICT_VIEWS:
            return view, j - 1
    return "", m


def loop_targets(code: CodeType, offset: int) -> frozenset[str]:
    """The variables of the `for` loops of `code` that enclose `offset`."""
    try:
        insts = bytecode.instructions(code)
    except Exception:  # noqa: BLE001 - bytecode this scanner does not know
        return frozenset()
    names: set[str] = set()
    for k, (start, op, end, _line) in enumerate(insts):
        if op != "FOR_ITER" or not start < offset < end:
            continue
        for _, target, name, _ in insts[k + 1:k + 8]:  # `bs` or `bs, graph` (UNPACK_SEQUENCE, then a store each)
            if target in bytecode.STORES:
                names.add(name)
            elif target != "UNPACK_SEQUENCE":
                break
    return frozenset(names)


def _root(ins: dis.Instruction, code: CodeType) -> Optional[tuple[str, str]]:
    op, val = ins.opname, ins.argval
    if op.startswith("LOAD_FAST"):
        name = val[-1] if isinstance(val, tuple) else val
        return ("local", name) if isinstance(name, str) else None
    if op == "LOAD_GLOBAL":
        return "global", val
    if op == "LOAD_NAME":
        return "name", val
    if op in ("LOAD_DEREF", "LOAD_CLASSDEREF") and val in code.co_freevars:
        return "deref", val
    return None


def _attr(ins: dis.Instruction) -> Optional[str]:
    """The attribute a plain (non-method) attribute load reads."""
    if ins.opname != "LOAD_ATTR":
        return None
    if _PY312 and (ins.arg or 0) & 1:
        return None  # a method load (`obj.meth(...)`)
    return ins.argval


def _method(ins: dis.Instruction) -> Optional[str]:
    """The attribute a method load reads (`obj.meth(...)`)."""
    if ins.opname == "LOAD_METHOD" or (ins.opname in ("LOAD_ATTR", "LOAD_SUPER_ATTR") and _PY312 and (ins.arg or 0) & 1):
        return ins.argval
    return None


def _super(insts: list, i: int, code: CodeType) -> Optional[tuple[int, list]]:
    """`super()` at instruction i: (the index after it, the steps it starts with), or None.
    3.11 calls super() and loads the attribute; 3.12 loads `__class__` and self, then LOAD_SUPER_ATTR."""
    ins = insts[i]
    if ins.opname != "LOAD_GLOBAL" or ins.argval != "super" or not code.co_argcount:
        return None
    if _PY312:
        if i + 3 < len(insts) and insts[i + 1].argval == "__class__" and insts[i + 3].opname == "LOAD_SUPER_ATTR":
            name = insts[i + 3].argval
            return (i + 4, [("attr", name)]) if not (insts[i + 3].arg or 0) & 1 else (i + 4, [("call", name)])
        return None
    k = i + 1
    if k < len(insts) and insts[k].opname == "PRECALL":
        k += 1
    if k < len(insts) and insts[k].opname == "CALL" and insts[k].arg == 0:
        return k + 1, []
    return None


def _scan(code: CodeType):
    insts = [i for i in dis.get_instructions(code) if i.opname != "CACHE"]
    i, n = 0, len(insts)
    while i < n:
        root, start, j = _root(insts[i], code), insts[i], i + 1
        steps: list[tuple[str, Any]] = []
        sup = _super(insts, i, code)
        if sup is not None:
            root, (j, steps) = ("super", code.co_varnames[0]), sup
        if root is None:
            i += 1
            continue
        called = bool(steps) and steps[-1][0] == "call"
        if called:
            steps[-1] = ("attr", steps[-1][1])
        while j < n and not called:
            name = _attr(insts[j])
            if name is not None:
                steps.append(("attr", name))
                j += 1
            elif insts[j].opname == "LOAD_CONST" and j + 1 < n and insts[j + 1].opname == "BINARY_SUBSCR" \
                    and isinstance(insts[j].argval, (str, int)):
                steps.append(("item", insts[j].argval))
                j += 2
            elif _method(insts[j]) is not None:
                # A call of the chain: the chain itself stays a read (`self.mode.startswith(...)`),
                # and the callable is one (a partial freezes its arguments).
                if steps or root[0] not in ("local", "super"):
                    site = _site(root, tuple(steps), _use(insts, j), start, insts[j - 1])
                    if site is not None:
                        yield site
                steps.append(("attr", insts[j].argval))
                called = True
                j += 1
            else:
                break
        last = insts[j - 1]
        if not called:
            j, steps = _len_call(insts, i, j, steps)
        if root[0] in ("local", "super") and not steps:
            i = j
            continue
        site = _site(root, tuple(steps), VALUE if called else _use(insts, j), start, last,
                     () if called else _test(insts, j))
        if site is not None:
            yield site
        i = j


def _site(root: tuple[str, str], steps: tuple, use: str, start: dis.Instruction, last: dis.Instruction,
          test: tuple = ()) -> Optional[ReadSite]:
    pos, end = getattr(start, "positions", None), getattr(last, "positions", None)  # Python 3.11+
    if pos is None or pos.lineno is None:
        return None
    end_line = (end.end_lineno if end else None) or pos.lineno
    end_col = (end.end_col_offset if end else None) or pos.col_offset or 0
    return ReadSite(root[0], root[1], steps, use, pos.lineno, (pos.col_offset or 0) + 1, end_line, end_col + 1,
                    start.offset, test)


def _scan_var(code: CodeType):
    """`CHAIN[name]` with `name` a local: the chain (a root and attributes), then LOAD_FAST name, BINARY_SUBSCR."""
    insts = [i for i in dis.get_instructions(code) if i.opname != "CACHE"]
    for k, ins in enumerate(insts):
        if ins.opname != "BINARY_SUBSCR" or k < 2 or not insts[k - 1].opname.startswith("LOAD_FAST"):
            continue
        index = insts[k - 1].argval
        if not isinstance(index, str):
            continue
        chain = _chain_ending(insts, k - 1, code)
        if chain is None:
            continue
        root, steps, m = chain
        site = _site(root, steps + (("var", index),), _use(insts, k + 1), insts[m], ins, _test(insts, k + 1))
        if site is not None:
            yield site


def unpacked(code: CodeType, site: ReadSite) -> bool:
    """Whether the chain read at `site` is unpacked into a call (`f(*CHAIN)`, `f(**CHAIN)`)."""
    insts = [i for i in dis.get_instructions(code) if i.opname != "CACHE"]
    for k, ins in enumerate(insts):
        if ins.offset == site.offset:
            after = k + 1 + len(site.steps)
            nxt = insts[after] if after < len(insts) else None
            return nxt is not None and (nxt.opname in ("DICT_MERGE", "DICT_UPDATE", "CALL_FUNCTION_EX", "LIST_EXTEND")
                                        or (nxt.opname == "BUILD_MAP" and nxt.arg == 0))
    return False


# --- tests a read feeds: what the capture derived from the value ------------------------------------
_COMPARE = {"<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">": operator.gt,
            ">=": operator.ge}
_BINARY = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv, "//": operator.floordiv,
           "%": operator.mod, "**": operator.pow, "&": operator.and_, "|": operator.or_, "^": operator.xor,
           "<<": operator.lshift, ">>": operator.rshift}
_CONSTANTS = (int, float, str, bytes, bool, type(None), tuple, frozenset)


def _test(insts: list, j: int) -> tuple:
    """The ops from instruction j on that turn the value on top of the stack into a bool with constants
    only (`== 0`, `> 1.0`, `% 2 == 0`, `is None`, `in ("a", "b")`, `not`, a conditional jump's truth
    test), or () when the value goes on as it is (a store, an operand of other work, a call)."""
    ops: list[tuple] = []
    k, n = j, len(insts)
    while k < n and len(ops) < 6:
        ins = insts[k]
        op = ins.opname
        if op in ("LOAD_CONST", "LOAD_SMALL_INT") and k + 1 < n:
            const, nxt = ins.argval, insts[k + 1]
            if not isinstance(const, _CONSTANTS):
                return ()
            if nxt.opname == "COMPARE_OP":
                name = str(nxt.argval).replace("bool(", "").rstrip(")")
                return tuple(ops) + (("cmp", name, const),) if name in _COMPARE else ()
            if nxt.opname == "IS_OP":
                return tuple(ops) + (("is", bool(nxt.arg), const),)
            if nxt.opname == "CONTAINS_OP":
                return tuple(ops) + (("in", bool(nxt.arg), const),)
            if nxt.opname == "BINARY_OP":
                name = nxt.argrepr[:-1] if nxt.argrepr.endswith("=") else nxt.argrepr
                if name not in _BINARY:
                    return ()
                ops.append(("bin", name, const))
                k += 2
                continue
            return ()
        if op == "UNARY_NOT":
            return tuple(ops) + (("not",),)
        if op == "UNARY_NEGATIVE":
            ops.append(("neg",))
        elif op == "TO_BOOL":
            pass
        elif op.startswith("POP_JUMP") and "IF" in op:
            return tuple(ops) + ((("none",) if "NONE" in op else ("truth",)),)
        else:
            return ()
        k += 1
    return ()


def derive(test: tuple, value: Any) -> Any:
    """What the ops of `_test` make of `value` (a bool); a private marker when they raise."""
    try:
        for op in test:
            kind = op[0]
            if kind == "cmp":
                value = _COMPARE[op[1]](value, op[2])
            elif kind == "is":
                value = (value is op[2]) != op[1]
            elif kind == "in":
                value = (value in op[2]) != op[1]
            elif kind == "bin":
                value = _BINARY[op[1]](value, op[2])
            elif kind == "neg":
                value = -value
            elif kind == "not":
                value = not value
            elif kind == "truth":
                value = bool(value)
            elif kind == "none":
                value = value is None
        return bool(value)
    except Exception:  # noqa: BLE001 - a test that raises: its outcome differs from any that did not
        return _RAISED


_RAISED = object()


def _scan_counters(code: CodeType):
    """`X.a += 1` (chain, COPY 1, LOAD_ATTR a, ..., SWAP 2, STORE_ATTR a), `X[k] += 1` (chain, LOAD_CONST k,
    COPY 2, COPY 2, BINARY_SUBSCR, ..., STORE_SUBSCR), `X.a = X.a + 1` (a read of X.a, then X and STORE_ATTR a
    on the line), `X.a` read on an earlier line and stored back (through locals), and `G += 1` of a
    global (LOAD_GLOBAL G, ..., STORE_GLOBAL G)."""
    insts = [i for i in dis.get_instructions(code) if i.opname != "CACHE"]
    reads: dict[tuple[Optional[int], str], ReadSite] = {(s.line, s.text): s for s in plan(code)}
    first_read: dict[str, ReadSite] = {}  # each chain's first read in the code, by line
    for read in sorted((s for s in reads.values() if s.line is not None), key=lambda s: s.line):
        first_read.setdefault(read.text, read)
    for k, ins in enumerate(insts):
        positions = getattr(ins, "positions", None)  # Python 3.11+
        line = positions.lineno if positions else None
        site: Optional[ReadSite]
        if ins.opname == "STORE_GLOBAL":
            site = reads.get((line, ins.argval))
            if site is not None and site.kind == "global" and _computed(insts, k):
                yield site
        elif ins.opname in ("STORE_ATTR", "STORE_SUBSCR"):
            site = _augmented_target(insts, k, code)
            if site is None and ins.opname == "STORE_ATTR":
                target = _chain_before(insts, k, code)
                if target is not None:
                    site = reads.get((line, f"{target}.{ins.argval}"))
                    earlier = first_read.get(f"{target}.{ins.argval}")
                    chain = _chain_ending(insts, k, code) if site is None and earlier is not None else None
                    if chain is not None and earlier is not None and line is not None and earlier.line < line:
                        # `start = self._seen_tokens; end = start + n; self._seen_tokens = end`: read,
                        # then stored back through locals; watched at the store.
                        root, steps, j = chain
                        site = _site(root, steps + (("attr", ins.argval),), VALUE, insts[j], ins)
            if site is not None:
                yield site


def _scan_stores(code: CodeType):
    """`CHAIN.a = ...` (chain, STORE_ATTR a) and `CHAIN[k] = ...` with a constant k (chain, LOAD_CONST k,
    STORE_SUBSCR); CHAIN is a root and plain attributes."""
    insts = [i for i in dis.get_instructions(code) if i.opname != "CACHE"]
    for k, ins in enumerate(insts):
        if ins.opname == "STORE_ATTR":
            end, step = k, ("attr", ins.argval)
        elif ins.opname == "STORE_SUBSCR" and k > 1 and insts[k - 1].opname == "LOAD_CONST" \
                and isinstance(insts[k - 1].argval, (str, int)):
            end, step = k - 1, ("item", insts[k - 1].argval)
        else:
            continue
        chain = _chain_ending(insts, end, code)
        if chain is not None:
            root, steps, j = chain
            site = _site(root, steps + (step,), VALUE, insts[j], ins)
            if site is not None:
                yield site


def _chain_ending(insts: list, end: int, code: CodeType) -> Optional[tuple[tuple[str, str], tuple, int]]:
    """The chain (a root and plain attributes) loaded by the instructions just before `end`:
    (root, its attribute steps, the index of the root's load), or None (a class body's names too)."""
    names, j = [], end - 1
    while j >= 0 and _attr(insts[j]) is not None:
        names.append(("attr", insts[j].argval))
        j -= 1
    root = _root(insts[j], code) if j >= 0 else None
    if root is None or root[0] == "name":
        return None
    return root, tuple(reversed(names)), j


def _computed(insts: list, k: int) -> bool:
    """The value stored at k was computed by an operator (`x + 1`), not loaded as it is."""
    return k > 0 and insts[k - 1].opname in ("BINARY_OP", "SWAP")


def _chain_before(insts: list, k: int, code: CodeType) -> Optional[str]:
    """The text of the plain chain (root and attributes) loaded just before instruction k."""
    names, m = [], k - 1
    while m >= 0 and _attr(insts[m]) is not None:
        names.append(insts[m].argval)
        m -= 1
    root = _root(insts[m], code) if m >= 0 else None
    if root is None:
        return None
    return ".".join([root[1], *reversed(names)])


def _augmented_target(insts: list, k: int, code: CodeType) -> Optional[ReadSite]:
    """The chain an augmented assignment ending at store k writes (`self.pos += 1`)."""
    ins = insts[k]
    want = ("COPY", 1) if ins.opname == "STORE_ATTR" else ("COPY", 2)
    for m in range(k - 1, max(k - 40, 0), -1):
        op = insts[m]
        if (op.opname, op.arg) != want:
            continue
        if ins.opname == "STORE_ATTR":
            if m + 1 >= k or _attr(insts[m + 1]) != ins.argval:
                return None
            end, step = m, ("attr", ins.argval)
        else:
            if insts[m - 1].opname != "LOAD_CONST" or not isinstance(insts[m - 1].argval, (str, int)):
                continue  # the second COPY 2 of the pair
            end, step = m - 1, ("item", insts[m - 1].argval)
        chain = _chain_ending(insts, end, code)
        if chain is None:
            return None
        root, steps, j = chain
        return _site(root, steps + (step,), VALUE, insts[j], insts[k])
    return None


def _len_call(insts: list, i: int, j: int, steps: list) -> tuple[int, list]:
    """`len(chain)`: the builtin loaded just before the chain and called on it alone."""
    before = insts[i - 1] if i else None
    if before is None or before.opname not in ("LOAD_GLOBAL", "LOAD_NAME") or before.argval != "len":
        return j, steps
    k = j
    if k < len(insts) and insts[k].opname == "PRECALL":
        k += 1
    if k < len(insts) and insts[k].opname == "CALL" and insts[k].arg == 1:
        return k + 1, steps + [("len", None)]
    return j, steps


def _use(insts: list, j: int) -> str:
    """What consumes the value on top of the stack at instruction `j`."""
    depth = 1  # stack items at or above the value (or what it was combined into)
    for ins in insts[j:j + 60]:
        op = ins.opname
        if "JUMP_IF" in op or (op.startswith("POP_JUMP") and "IF" in op):
            if depth == 1:
                return BRANCH
            depth -= 1
            continue
        if op == "GET_ITER":
            return BRANCH if depth == 1 else VALUE
        if op == "BINARY_SLICE" and depth == 3:
            return VALUE  # Python 3.12's `container[a:b]`: the container is the deepest of the three
        if op == "BUILD_SLICE" or op == "BINARY_SLICE":
            pops = ins.arg if op == "BUILD_SLICE" else 3
            if pops >= depth:
                return SLICE
            depth += 1 - pops
            continue
        if op == "LOAD_GLOBAL" or op == "LOAD_ATTR":
            pops = 0 if op == "LOAD_GLOBAL" else 1
            pushes = pops + dis.stack_effect(ins.opcode, ins.arg, jump=False)
        elif op == "CALL":  # the callable, its self-or-NULL slot and the arguments
            pops, pushes = (ins.arg or 0) + 2, 1
        elif op in ("BUILD_TUPLE", "BUILD_LIST"):
            pops, pushes = ins.arg or 0, 1
        elif op in _STACK:
            pops, pushes = _STACK[op]
        else:
            return VALUE  # a store, a return, a jump, or an instruction not modelled
        if pops >= depth:
            if pushes != 1:
                return VALUE
            depth = 1
        else:
            depth += pushes - pops
    return VALUE
