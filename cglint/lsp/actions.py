"""Code actions: a `# noqa: CODE` comment for a finding, the safe fixes of its rule, and
every safe fix of the file (`source.fixAll`)."""
from __future__ import annotations

from typing import Callable, Optional

from lsprotocol import types
from pygls.workspace import TextDocument

from cglint import catalogue
from cglint.suppress import with_noqa

FIX_ALL = f"{types.CodeActionKind.SourceFixAll.value}.cglint"


def text_edit(document: TextDocument, after: str) -> types.TextEdit:
    """One edit that turns the document into `after`: the lines between the common start
    and the common end replaced."""
    old, new = document.source.splitlines(keepends=True), after.splitlines(keepends=True)
    start = 0
    while start < min(len(old), len(new)) and old[start] == new[start]:
        start += 1
    end = 0
    while end < min(len(old), len(new)) - start and old[-1 - end] == new[-1 - end]:
        end += 1
    first, last = types.Position(line=start, character=0), types.Position(line=len(old) - end, character=0)
    if end == 0 and old and not old[-1].endswith(("\n", "\r")):  # no line after the last one
        # A Position in pygls 2.0; 2.1 declares its own class with the same fields.
        last = document.position_to_client_units(types.Position(line=len(old) - 1, character=len(old[-1])))  # type: ignore[arg-type]
    return types.TextEdit(range=types.Range(start=first, end=last), new_text="".join(new[start : len(new) - end]))


def _action(title: str, kind: str, document: TextDocument, after: str, diagnostic: Optional[types.Diagnostic] = None) -> types.CodeAction:
    edit = types.WorkspaceEdit(
        document_changes=[
            types.TextDocumentEdit(
                text_document=types.OptionalVersionedTextDocumentIdentifier(uri=document.uri, version=document.version),
                edits=[text_edit(document, after)],
            )
        ]
    )
    return types.CodeAction(title=title, kind=kind, diagnostics=[diagnostic] if diagnostic else None, edit=edit, is_preferred=kind == types.CodeActionKind.QuickFix or None)


def noqa(document: TextDocument, diagnostic: types.Diagnostic) -> Optional[types.CodeAction]:
    """`# noqa: CODE` on the finding's first line that can take a comment (or merged into
    the `# noqa` already there)."""
    code = str(diagnostic.code)
    if code in catalogue.TOOL_DIAGNOSTICS:
        return None
    after, added = with_noqa(document.source, [(code, diagnostic.range.start.line + 1, diagnostic.range.end.line + 1)])
    if not added:
        return None
    action = _action(f"Add `# noqa: {code}`", types.CodeActionKind.QuickFix, document, after, diagnostic)
    action.is_preferred = None  # the fix, where there is one, is preferred
    return action


def fix(document: TextDocument, diagnostic: types.Diagnostic, fixed: Callable[[Optional[str]], Optional[str]]) -> Optional[types.CodeAction]:
    """The safe fix of the finding's rule; `fixed(code)` is the document with those fixes made."""
    code = str(diagnostic.code)
    rule = catalogue.by_code().get(code)
    if rule is None or not rule.can_fix():
        return None
    after = fixed(code)
    if after is None:
        return None
    return _action(f"Fix {code} {rule.name} (safe fix)", types.CodeActionKind.QuickFix, document, after, diagnostic)


def fix_all(document: TextDocument, fixed: Callable[[Optional[str]], Optional[str]]) -> Optional[types.CodeAction]:
    after = fixed(None)
    return _action("Apply every safe cglint fix", FIX_ALL, document, after) if after is not None else None
