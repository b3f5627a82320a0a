"""Which value each parameter of a callee gets from one call.

A call binds its positional arguments in order, its keywords by name, `*seq` and `**mapping`
where their items and keys are known, and first what a `functools.partial` bound
(`partial(MHA, num_heads=8, **factory_kwargs)(dim)`). Where an unpacking is not known
(`Block(dim, **kwargs)` with `kwargs` from a caller), a parameter it may fill is unknown,
never its default: a default decides captured branches (`if not self.checkpointing:`).
"""

from __future__ import annotations

from typing import Callable

import libcst as cst

from cglint.engine.definitions import FunctionInfo
from cglint.engine.values import OPEN_KEYWORDS, UNKNOWN, Kind, Value


def bind(
    function: FunctionInfo,
    call: cst.Call,
    bound: bool,
    value_of: Callable[[cst.BaseExpression], Value],
    partial: tuple = (),
    passes_first: bool = False,
) -> dict[str, Value]:
    """The values `call` gives `function`'s parameters (`bound`: self is passed by the
    receiver; `partial`: the (positional, keywords) a partial bound first). Surplus
    positionals go to a `*args` parameter as a tuple, unknown keywords to `**kwargs` as a dict."""
    names = function.bound_names(bound, passes_first)
    positional: list[Value] = list(partial[0]) if partial else []
    args: dict[str, Value] = {k: v for k, v in partial[1] if k != OPEN_KEYWORDS} if partial else {}
    open_keywords = bool(partial) and any(k == OPEN_KEYWORDS for k, _ in partial[1])
    known_positions = True
    for arg in call.args:
        if arg.keyword is not None:
            args[arg.keyword.value] = value_of(arg.value)
        elif arg.star == "**":  # `model(**inputs)`: the entries known under string keys
            unpacked = value_of(arg.value)
            args.update(unpacked.fields)
            open_keywords = open_keywords or not unpacked.keys_known
        elif arg.star == "*" and known_positions:
            items = value_of(arg.value).items
            known_positions = bool(items)  # past an unknown unpacking, no place is known
            positional.extend(items)
        elif known_positions:
            positional.append(value_of(arg.value))
    star, double_star = function.star_param, function.kwargs_param
    # `GraphedIteration(model, opt, *batch)`: the places before an unknown unpacking are known.
    args.update((name, value) for name, value in zip(names, positional) if name not in args)
    if known_positions and star is not None and len(positional) > len(names):
        args[star] = Value(Kind.OBJECT, items=tuple(positional[len(names):]))
    if double_star is not None:
        # `def forward(self, x, **kwargs)`: the keywords no parameter takes, as a dict.
        named = set(function.positional_params) | set(function.keyword_only_params)
        extra = tuple((k, v) for k, v in args.items() if k not in named and k != star)
        for key, _ in extra:
            del args[key]
        if extra:
            args[double_star] = Value(Kind.OBJECT, fields=extra)
    unsure = (names[len(positional):] if not known_positions else []) + (names + function.keyword_only_params if open_keywords else [])
    for name in unsure:
        args.setdefault(name, UNKNOWN)
    return args
