"""Small helpers over libcst nodes, shared by the engine and the rules."""
from __future__ import annotations

from dataclasses import fields, is_dataclass
from typing import Callable, Iterator, Optional

import libcst as cst

# Node types that never hold code: skipping them keeps the walk lean (a stock
# CSTVisitor spends most of its time dispatching on whitespace and punctuation).
_TRIVIA = (
    cst.BaseParenthesizableWhitespace,
    cst.EmptyLine,
    cst.TrailingWhitespace,
    cst.Comment,
    cst.Newline,
    cst.LeftParen,
    cst.RightParen,
    cst.LeftSquareBracket,
    cst.RightSquareBracket,
    cst.LeftCurlyBrace,
    cst.RightCurlyBrace,
    cst.Comma,
    cst.Dot,
    cst.Colon,
    cst.Semicolon,
    cst.AssignEqual,
    cst.ImportStar,
)
# Fields that only ever hold trivia, skipped without looking at their values.
_TRIVIA_FIELDS = {"lpar", "rpar", "comma", "leading_lines", "lines_after_decorators", "header", "footer"}
_FIELDS: dict[type, tuple[str, ...]] = {}
_CODE: dict[type, bool] = {}  # node type -> holds code (isinstance on libcst's ABCs is slow)
# Nodes that open a scope a walk does not enter; libcst's node classes are final, so their exact
# type says it (isinstance on libcst's ABC metaclass is a Python call for every miss).
SCOPES = frozenset({cst.FunctionDef, cst.ClassDef, cst.Lambda})


def _child_fields(node_type: type) -> tuple[str, ...]:
    names = _FIELDS.get(node_type)
    if names is None:
        names = tuple(
            f.name for f in fields(node_type) if f.name not in _TRIVIA_FIELDS and "whitespace" not in f.name
        ) if is_dataclass(node_type) else ()
        _FIELDS[node_type] = names
    return names


def _holds_code(kind: type) -> bool:
    found = _CODE.get(kind)
    if found is None:
        # Through the MRO: issubclass on libcst's ABCs builds each base's subclass cache first.
        mro = set(kind.__mro__)
        found = _CODE[kind] = cst.CSTNode in mro and mro.isdisjoint(_TRIVIA)
    return found


def children(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Direct child nodes that can hold code, in source order."""
    for name in _child_fields(type(node)):
        value = getattr(node, name)
        kind = type(value)
        if kind is tuple or kind is list:
            for item in value:
                if _holds_code(type(item)):
                    yield item
        elif _holds_code(kind):
            yield value


def descendants(node: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Every code node below `node` (pre-order), without entering nested defs or lambdas."""
    stack = list(children(node))
    stack.reverse()
    while stack:
        current = stack.pop()
        yield current
        if type(current) in SCOPES:
            continue
        kids = list(children(current))
        kids.reverse()
        stack.extend(kids)


def dotted_name(node: cst.BaseExpression) -> Optional[str]:
    """`a.b.c` for a Name/Attribute chain, else None."""
    parts = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if isinstance(node, cst.Name):
        parts.append(node.value)
        return ".".join(reversed(parts))
    return None


def call_method(call: cst.Call) -> Optional[tuple[cst.BaseExpression, str]]:
    """(receiver, method name) for `receiver.method(...)`."""
    if isinstance(call.func, cst.Attribute):
        return call.func.value, call.func.attr.value
    return None


def keyword(call: cst.Call, name: str) -> Optional[cst.BaseExpression]:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg.value
    return None


def positional(call: cst.Call) -> list[cst.BaseExpression]:
    return [a.value for a in call.args if a.keyword is None and not a.star]


def string_value(node: Optional[cst.BaseExpression]) -> Optional[str]:
    if isinstance(node, cst.SimpleString):
        try:
            value = node.evaluated_value
        except Exception:  # noqa: BLE001 - odd prefixes; not a plain literal
            return None
        return value if isinstance(value, str) else None
    return None


def item_name(node: cst.BaseExpression) -> Optional[str]:
    """`"ent_coef"` for `hparams["ent_coef"]`, `"[0]"` for `coefs[0]`: an entry of a container
    named by a literal."""
    if not isinstance(node, cst.Subscript) or len(node.slice) != 1 or not isinstance(node.slice[0].slice, cst.Index):
        return None
    index = node.slice[0].slice.value
    if isinstance(index, cst.Integer):
        return f"[{index.value}]"
    return string_value(index)


def is_true(node: Optional[cst.BaseExpression]) -> bool:
    return isinstance(node, cst.Name) and node.value == "True"


def is_false(node: Optional[cst.BaseExpression]) -> bool:
    return isinstance(node, cst.Name) and node.value == "False"


_CODE_MODULE = cst.Module(body=[])


_CODE_CACHE: dict[tuple[int, int], tuple[cst.CSTNode, str]] = {}


def code_of(node: cst.CSTNode, limit: int = 60) -> str:
    """One-line source text of a node, shortened for traces and messages (memoised: a chain
    of calls `f()()()...` asks for the text of each inner call again)."""
    key = (id(node), limit)
    cached = _CODE_CACHE.get(key)
    if cached is not None and cached[0] is node:
        return cached[1]
    if len(_CODE_CACHE) > 20_000:
        _CODE_CACHE.clear()
    text = _code_of(node, limit)
    _CODE_CACHE[key] = (node, text)  # the node is kept so that its id stays unique
    return text


def _code_of(node: cst.CSTNode, limit: int) -> str:
    text = " ".join(_CODE_MODULE.code_for_node(node).split())
    # A trailing comma before a line break goes (`f(\n  a,\n)` reads `f(a)`); one written
    # on the line stays: `(x,)` is a tuple.
    text = text.replace(", )", ")").replace(", ]", "]").replace("( ", "(").replace(" )", ")").replace("[ ", "[").replace(" ]", "]")
    if len(text) <= limit:
        return text
    if isinstance(node, cst.Call):  # keep the callee readable: `decode_step(...)`
        callee = code_of(node.func, limit)
        if len(callee) + 5 <= limit:
            return callee + "(...)"
    return text[: limit - 3] + "..."


def assigned_names(target: cst.BaseExpression) -> Iterator[cst.BaseExpression]:
    """Leaf targets of an assignment target (unpacking tuples and lists)."""
    if isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            yield from assigned_names(element.value)
    elif isinstance(target, cst.StarredElement):
        yield from assigned_names(target.value)
    else:
        yield target


def nearest_assignment(name: str, statements) -> Optional[tuple[cst.SimpleStatementLine, cst.BaseExpression]]:
    """The first of `statements` (nearest first) with an assignment that binds the local
    `name` (`out = f(x)`, `out, cache = f(x)`), and the value assigned."""
    for stmt in statements:
        for small in stmt.body if isinstance(stmt, cst.SimpleStatementLine) else ():
            if isinstance(small, cst.Assign) and any(
                isinstance(leaf, cst.Name) and leaf.value == name for t in small.targets for leaf in assigned_names(t.target)
            ):
                return stmt, small.value
    return None


def iterated_container(name: str, function: cst.CSTNode) -> Optional[cst.BaseExpression]:
    """The container whose entries the local `name` holds, when every binding of it in
    `function` is a loop over that container: `for group in self.param_groups`, `for i, g in
    enumerate(groups)`, `for g, lr in zip(opt.param_groups, lrs)`, `for k, g in cfg.items()`.
    An entry written through `group["lr"] = v` is then an entry of an entry of that container."""
    found: list[cst.BaseExpression] = []
    for node in descendants(function):
        if isinstance(node, (cst.For, cst.CompFor)):
            if any(isinstance(leaf, cst.Name) and leaf.value == name for leaf in assigned_names(node.target)):
                source = _loop_source(name, node.target, node.iter)
                if source is None:
                    return None
                found.append(source)
        elif isinstance(node, (cst.Assign, cst.AugAssign, cst.AnnAssign, cst.WithItem, cst.NamedExpr)):
            targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [
                node.asname.name if isinstance(node, cst.WithItem) and node.asname else getattr(node, "target", None)
            ]
            if any(isinstance(leaf, cst.Name) and leaf.value == name for t in targets if t is not None for leaf in assigned_names(t)):
                return None
    if not found or len({code_of(f, 400) for f in found}) != 1:
        return None
    return found[0]


def _loop_source(name: str, target: cst.BaseExpression, iterable: cst.BaseExpression) -> Optional[cst.BaseExpression]:
    if isinstance(target, cst.Name):
        method = call_method(iterable) if isinstance(iterable, cst.Call) else None
        if method is not None and method[1] == "values" and not iterable.args:  # type: ignore[attr-defined]
            return method[0]
        return None if isinstance(iterable, cst.Call) and code_of(iterable.func) in ("range", "zip", "enumerate") else iterable
    if not isinstance(target, (cst.Tuple, cst.List)) or not isinstance(iterable, cst.Call):
        return None
    elements = [e.value for e in target.elements]
    position = next((i for i, e in enumerate(elements) if isinstance(e, cst.Name) and e.value == name), None)
    func, args = code_of(iterable.func), [a.value for a in iterable.args if not a.star and a.keyword is None]
    if position is None:
        return None
    if func == "zip" and position < len(args):
        return _loop_source(name, elements[position], args[position])
    if func == "enumerate" and position == 1 and args:
        return _loop_source(name, elements[1], args[0])
    method = call_method(iterable)
    if method is not None and method[1] == "items" and position == 1 and not iterable.args:
        return method[0]
    return None


def identifiers(node: cst.CSTNode) -> frozenset:
    """Every name and attribute name used anywhere below `node`, nested definitions included."""
    found = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, cst.Name):
            found.add(current.value)
        stack.extend(children(current))
    return frozenset(found)


def decorator_callee(decorator: cst.Decorator) -> cst.BaseExpression:
    """What a decorator names: `torch.compile` in `@torch.compile` and `@torch.compile(...)`."""
    expr = decorator.decorator
    return expr.func if isinstance(expr, cst.Call) else expr


def callee_name(func: cst.BaseExpression) -> Optional[str]:
    """The name a call is spelled with: `set_scale` for `model.head.set_scale`, None for `fns[i]`."""
    if isinstance(func, cst.Attribute):
        return func.attr.value
    return func.value if isinstance(func, cst.Name) else None


def called_names(node: cst.CSTNode) -> frozenset:
    """The last name of everything called or used as a decorator below `node`, nested
    definitions included (`graph` for `torch.cuda.graph(g)`)."""
    found = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, (cst.Call, cst.Decorator)):
            found.add(callee_name(current.func if isinstance(current, cst.Call) else decorator_callee(current)))
        stack.extend(children(current))
    return frozenset(n for n in found if n is not None)


def calls_in(statements) -> Iterator[cst.Call]:
    """Every call in these statements (nested definitions excluded), in source order."""
    for stmt in statements:
        for node in executed(stmt):
            if isinstance(node, cst.Call):
                yield node


def executed(stmt: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """`stmt` and the nodes below it that run when it runs: a `def` runs its decorators and
    defaults, not its body (a module's skeleton has no body there; a whole parse does)."""
    yield stmt
    if isinstance(stmt, cst.FunctionDef):
        for part in (*stmt.decorators, stmt.params):
            yield part
            yield from descendants(part)
        return
    yield from descendants(stmt)


def operands(expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The sub-expressions an expression computes its value from, in source order: both
    sides of arithmetic and comparisons, the branches of a ternary (not its test), the
    items of a tuple or list, a subscript's value and indices, a call's callee and
    arguments, an attribute's owner. Empty for names, literals and anything else."""
    if isinstance(expr, cst.Attribute):
        return [expr.value]
    if isinstance(expr, cst.BinaryOperation):
        return [expr.left, expr.right]
    if isinstance(expr, cst.Comparison):
        return [expr.left, *(c.comparator for c in expr.comparisons)]
    if isinstance(expr, cst.UnaryOperation):
        return [expr.expression]
    if isinstance(expr, cst.IfExp):
        return [expr.body, expr.orelse]
    if isinstance(expr, (cst.Tuple, cst.List)):
        return [e.value for e in expr.elements]
    if isinstance(expr, cst.Subscript):
        return [expr.value, *(e.slice.value for e in expr.slice if isinstance(e.slice, cst.Index))]
    if isinstance(expr, cst.Call):
        return [expr.func, *(a.value for a in expr.args)]
    return []


def reads(expr: cst.BaseExpression, opens: Callable[[cst.BaseExpression], bool]) -> Iterator[cst.BaseExpression]:
    """The names, attributes and named entries (`cfg["scale"]`) `expr` reads, in source order, looking into the operands of
    the sub-expressions `opens` accepts and into nothing else: a rule decides which operators
    pass a value through (`n + 1` does, `f(n)` may not) and whether `a.b` reads `a.b` or `a`."""
    stack = [expr]
    while stack:
        current = stack.pop()
        if opens(current):
            stack.extend(reversed(operands(current)))
        elif isinstance(current, (cst.Name, cst.Attribute)) or item_name(current) is not None:
            yield current


# Calls that bind an attribute named by a string: `setattr(obj, "x", v)`, and a module's
# `register_buffer("x", t)` / `register_parameter("x", p)`, which set `self.x`.
_REGISTERING = frozenset({"register_buffer", "register_parameter"})


def registers_tensor(call: cst.Call) -> bool:
    """`register_buffer(...)` / `register_parameter(...)`: the attribute it binds holds a tensor."""
    return isinstance(call.func, cst.Attribute) and call.func.attr.value in _REGISTERING


def named_attribute_write(call: cst.Call) -> Optional[cst.Attribute]:
    """The attribute a call assigns by name, as the expression `obj.x` it binds; else None."""
    args = positional(call)
    if len(args) == 3 and isinstance(call.func, cst.Name) and call.func.value == "setattr":
        owner, name = args[0], string_value(args[1])
    elif len(args) >= 2 and isinstance(call.func, cst.Attribute) and call.func.attr.value in _REGISTERING:
        owner, name = call.func.value, string_value(args[0])
    else:
        return None
    return cst.Attribute(owner, cst.Name(name)) if name is not None and name.isidentifier() else None
