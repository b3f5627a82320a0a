"""Where a slot a capture read was written since: `inputs["x"] = ...`, `batch.x = ...`, `cls.gain = ...`.

An attribute of a plain object a guard read is watched from the end of the capture on (a
`__setattr__` on its class, watchers.watch_object), and that line is the writer. Dicts, lists
and classes are not watched: their types stay as they are, and a hook on `type` is not
possible. For those, the stores to the key are looked for in the bytecode of the code that can
have run them: the frame that replays first (a script's loop) and its callers, where a store
whose target evaluates to the same holder is certain (its key a constant or a variable); then
the functions and methods of the modules of that frame and of the holder's class, where the
key alone matches; for a dict or list entry, every module of the project, where a store to a
holder reached by the same name (`self.scalings[i] = s`) or of the same constant key
(`param_group["lr"] = lr`) is a candidate. A closure cell's writers are the functions that
share the cell (`nonlocal x; x = ...`), found through it.
"""
from __future__ import annotations

import dis
import gc
import sys
from types import CodeType, FrameType, FunctionType, ModuleType
from typing import Any, Iterator, Optional

from cglint.findings import Related
from cglint.verify.findings import frames

# (line, column, (kind, root, attributes) of the holder, or None when it is not a chain of names)
Store = tuple[int, int, Optional[tuple[str, str, tuple[str, ...]]]]
_stores: dict[tuple[CodeType, str, Any], tuple[Store, ...]] = {}


def stores(code: CodeType, step: str, key: Any) -> tuple[Store, ...]:
    """The stores `HOLDER.key = v` (step "attr") or `HOLDER[key] = v` (step "item") in `code`, its nested
    code included; HOLDER is a chain of a name and attributes."""
    found = _stores.get((code, step, key))
    if found is None:
        found = _stores[(code, step, key)] = tuple(_scan(code, step, key))
    return found


ANY = object()  # the key of `stores(code, "item", ANY)`: every `HOLDER[key] = v` whose key is a constant or a name
_KEY_LOADS = ("LOAD_CONST", "LOAD_FAST", "LOAD_NAME", "LOAD_GLOBAL", "LOAD_DEREF", "LOAD_SMALL_INT")


def _scan(code: CodeType, step: str, key: Any):
    insts = [i for i in dis.get_instructions(code) if i.opname != "CACHE"]
    for k, ins in enumerate(insts):
        if step == "attr" and ins.opname == "STORE_ATTR" and ins.argval == key:
            end = k
        elif step == "item" and ins.opname == "STORE_SUBSCR" and k and _stores_key(insts[k - 1], key):
            end = k - 1
        else:
            continue
        attrs, m = [], end - 1
        while m >= 0 and insts[m].opname == "LOAD_ATTR" and not (sys.version_info >= (3, 12) and (insts[m].arg or 0) & 1):
            attrs.append(insts[m].argval)
            m -= 1
        root = insts[m] if m >= 0 else None
        positions = getattr(root, "positions", None)  # Python 3.11+
        if root is None or positions is None or positions.lineno is None:
            continue
        kind = {"LOAD_FAST": "local", "LOAD_GLOBAL": "global", "LOAD_NAME": "name", "LOAD_DEREF": "deref"}.get(root.opname)
        if kind is None:  # `type(self).x = ...`: a call's result, matched by the key alone
            at = getattr(ins, "positions", None) or positions
            yield at.lineno, (at.col_offset or 0) + 1, None
            continue
        yield positions.lineno, (positions.col_offset or 0) + 1, (kind, root.argval, tuple(reversed(attrs)))
    for const in code.co_consts:
        if isinstance(const, CodeType):
            yield from _scan(const, step, key)


def _evaluate(frame: FrameType, holder: tuple[str, str, tuple[str, ...]]) -> Any:
    kind, root, attrs = holder
    space = frame.f_globals if kind == "global" else frame.f_locals
    value = space.get(root, frame.f_globals.get(root)) if kind == "name" else space.get(root)
    for attr in attrs:
        value = getattr(value, attr, None)
    return value


def find(holder: Any, step: str, key: Any, frame: Optional[FrameType],
         name: Optional[str] = None) -> tuple[list[Related], bool]:
    """Where `holder`'s slot may have been written: (related locations, best first; whether the first is
    certain: a store in the replaying frame whose target is `holder` itself). `name`: the attribute or
    variable the capture reached the holder by (`scalings` of `self.mgr.scalings[slot]`): a dict or list
    entry is looked for in every module of the project, where stores to a holder of that name, or to the
    same constant key, are the candidates."""
    if frame is None:
        return [], False
    owners = _owners(holder, step, key)
    caller: Optional[FrameType] = frame
    for _ in range(4):  # the replaying frame, then its callers (`check()` replays, the script wrote)
        if caller is None:
            break
        certain = []
        found_here = stores(caller.f_code, step, key)
        if step == "item":  # `self.static_kwargs[k] = v`: the key in a variable, the holder itself the target
            found_here = found_here + stores(caller.f_code, step, ANY)
        for line, column, target in found_here:
            try:
                if target is not None and any(_evaluate(caller, target) is o for o in owners):
                    certain.append((line, column))
            except Exception:  # noqa: BLE001 - a property that raises: not this store
                continue
        if certain:
            # The store nearest before the replay (or the call that led to it) ran last; in a loop,
            # a store after that line runs before the next one.
            here = caller.f_lineno
            before = [c for c in certain if c[0] < here]
            line, column = max(before) if before else max(certain)
            path = frames.display_path(caller.f_code.co_filename)
            return [Related(path, line, column, "the value is changed here")], True
        caller = frames.user_frame(caller.f_back)
    found: list[Related] = []
    for code in _codes(frame, owners[-1]):
        for line, column, target in stores(code, step, key):
            if target is not None and target[0] in ("global", "name"):
                try:
                    if not any(_evaluate_global(code, target) is o for o in owners):
                        continue
                except Exception:  # noqa: BLE001
                    continue
            related = Related(frames.display_path(code.co_filename), line, column, "the value may be changed here")
            if related not in found:
                found.append(related)
    if step == "item" and isinstance(holder, (dict, list)):
        for related in _entry_stores(holder, key, frame, name):
            if related not in found:
                found.append(related)
    return found, False


def _entry_stores(holder: Any, key: Any, frame: FrameType, name: Optional[str]) -> list[Related]:
    """`HOLDER[k] = v` anywhere in the project's modules, for a dict or list entry: stores to a holder
    reached by the same name (`self.scalings[i] = s` for `mgr.scalings[0]`) first, then stores of the
    same constant key to a holder the code cannot evaluate (`param_group["lr"] = lr`)."""
    by_name, by_key = [], []
    for code in _project_codes(frame):
        for line, column, target in stores(code, "item", ANY):
            if target is None:
                continue
            _kind, root, attrs = target
            if name is not None and (attrs[-1] if attrs else root) == name:
                by_name.append(Related(frames.display_path(code.co_filename), line, column,
                                       "the value may be changed here"))
        if isinstance(key, (str, int)) and not isinstance(key, bool):
            for line, column, target in stores(code, "item", key):
                if target is not None and target[0] in ("global", "name"):
                    try:
                        if _evaluate_global(code, target) is not holder:
                            continue
                    except Exception:  # noqa: BLE001
                        continue
                by_key.append(Related(frames.display_path(code.co_filename), line, column,
                                      "the value may be changed here"))
    both = [r for r in by_name if r in by_key]
    return both + [r for r in by_name if r not in both] + [r for r in by_key if r not in both]


_project: dict[str, Any] = {"count": -1, "codes": []}


def _project_codes(frame: FrameType) -> list[CodeType]:
    """The functions and methods of every loaded module of the project (user code outside
    site-packages), initialisers left out; recomputed when modules were imported since."""
    if _project["count"] == len(sys.modules):
        return _project["codes"]
    codes: list[CodeType] = []
    for module in list(sys.modules.values()):
        if not isinstance(module, ModuleType) or not frames.is_user_module(module):
            continue
        space = object.__getattribute__(module, "__dict__")
        path = space.get("__file__") or ""
        if "site-packages" in path or "dist-packages" in path:
            continue
        codes.extend(code for code in _functions_of(space) if code not in codes)
    _project["count"], _project["codes"] = len(sys.modules), codes
    return codes


def _owners(holder: Any, step: str, key: Any) -> list[Any]:
    """The objects a write to the slot may have gone to: the holder and, for an attribute the holder
    inherits (`self.gain`, `super().factor`), the classes of its MRO that define it, nearest last."""
    if step != "attr":
        return [holder]
    if isinstance(holder, super):
        mro = holder.__self_class__.__mro__  # type: ignore[attr-defined]  # super's attributes, not in typeshed
        classes = mro[mro.index(holder.__thisclass__) + 1:]  # type: ignore[attr-defined]
        owners = []
    else:
        classes = holder.__mro__ if isinstance(holder, type) else type(holder).__mro__
        owners = [holder]
    defining = [c for c in classes if key in vars(c)]
    return owners + defining[:1] if defining else owners or [holder]


_globals_of: dict[CodeType, dict] = {}


def _evaluate_global(code: CodeType, target: tuple[str, str, tuple[str, ...]]) -> Any:
    value = _globals_of[code].get(target[1])
    for attr in target[2]:
        value = getattr(value, attr, None)
    return value


def _codes(frame: FrameType, holder: Any) -> list[CodeType]:
    """The user functions and methods of the replaying frame's module and of the holder's class's
    module, initialisers left out (they run before the capture)."""
    spaces = [frame.f_globals]
    owner = holder if isinstance(holder, (type, super)) else type(holder)
    owner = owner.__thisclass__ if isinstance(owner, super) else owner  # type: ignore[attr-defined]
    module = sys.modules.get(getattr(owner, "__module__", "") or "")
    if module is not None and vars(module) is not frame.f_globals:
        spaces.append(vars(module))
    codes: list[CodeType] = []
    for space in spaces:
        codes.extend(_functions_of(space))
    return codes


def _functions_of(space: dict) -> Iterator[CodeType]:
    """The code of the user functions and methods a module namespace defines (constructors left
    out: they build, they do not change between replays), each noted with its namespace."""
    for value in list(space.values()):
        members = vars(value).values() if isinstance(value, type) and value.__module__ == space.get("__name__") else (value,)
        for member in members:
            fn = getattr(member, "__func__", getattr(member, "fget", member))
            if isinstance(fn, FunctionType) and fn.__globals__ is space and frames.is_user_code(fn.__code__) \
                    and fn.__name__ not in ("__init__", "__post_init__"):
                _globals_of[fn.__code__] = space
                yield fn.__code__


def cell_stores(cell: Any, name: str) -> list[Related]:
    """The `nonlocal` assignments to `cell`: in the functions whose closure holds it (the function
    that made the cell assigned it before any capture and holds no closure of it)."""
    found: list[Related] = []
    for closure in gc.get_referrers(cell):
        if type(closure) is not tuple:
            continue
        for fn in gc.get_referrers(closure):
            if not isinstance(fn, FunctionType) or fn.__closure__ is not closure:
                continue
            for ins in dis.get_instructions(fn.__code__):
                at = getattr(ins, "positions", None)  # Python 3.11+
                if ins.opname == "STORE_DEREF" and ins.argval == name and at and at.lineno:
                    related = Related(frames.display_path(fn.__code__.co_filename), at.lineno,
                                      (at.col_offset or 0) + 1, f"`{name}` is assigned here (nonlocal)")
                    if related not in found:
                        found.append(related)
    return found


def _stores_key(load: dis.Instruction, key: Any) -> bool:
    """Whether the load before a STORE_SUBSCR puts `key` there: that constant, or for ANY a
    variable key (not the pair-load that also pushes the value)."""
    if key is ANY:
        return load.opname.startswith(_KEY_LOADS) and not load.opname.startswith("LOAD_FAST_LOAD")
    return load.opname == "LOAD_CONST" and load.argval == key
