"""The language server: diagnostics on open, on change (debounced) and on save, and code
actions, over stdio with pygls.

Checks run one at a time in a worker thread, in the order asked (the engine sets
process-wide state, such as the recursion limit, while it runs): the project is indexed
first, then each buffer is checked when the editor pauses.
"""
from __future__ import annotations

import asyncio
import os
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Optional

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.workspace import TextDocument

from cglint import __version__, catalogue
from cglint import config as config_module
from cglint.discovery import resolved
from cglint.lsp import actions
from cglint.lsp.diagnostics import SOURCE, default_docs_url, diagnostic
from cglint.lsp.index import ProjectIndex

DEBOUNCE_SECONDS = 0.3  # a pause in typing this long checks the buffer


class CglintServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("cglint", __version__)
        self.index: Optional[ProjectIndex] = None
        self.docs_url = default_docs_url()
        self.debounce = DEBOUNCE_SECONDS
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cglint-check")
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._published: dict[str, list[types.Diagnostic]] = {}
        self.initialization_options: dict = {}
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self.shutdown_requested = False  # the exit status: 0 after a `shutdown` request, else 1

    # --- work in the checking thread -----------------------------------------
    async def in_worker(self, job: Callable, *args):
        return await asyncio.get_running_loop().run_in_executor(self._worker, job, *args)

    def open_documents(self) -> dict[Path, TextDocument]:
        return {resolved(Path(doc.path)): doc for doc in list(self.workspace.text_documents.values()) if doc.path.endswith(".py")}

    def sources(self) -> dict[Path, str]:
        """The open buffers' texts, by resolved path (a snapshot taken in the event loop)."""
        return {path: doc.source for path, doc in self.open_documents().items()}

    def start_index(self, root: Path) -> None:
        loop = self._loop = asyncio.get_running_loop()  # messages from the worker are sent from here

        def build() -> None:
            try:
                self.index = ProjectIndex.for_root(root)
            except (config_module.ConfigError, catalogue.UnknownSelector) as exc:
                loop.call_soon_threadsafe(self.window_show_message, types.ShowMessageParams(types.MessageType.Error, f"cglint: {exc}; using the default settings"))
                self.index = ProjectIndex(root, config_module.Config(root=root))
            self.reindex()

        self._worker.submit(build)

    def reindex(self) -> None:
        try:
            assert self.index is not None, "reindex() before start_index()"
            self.index.index()
        except Exception:  # noqa: BLE001 - a failed index leaves the buffer checks working
            self.log(f"indexing failed:\n{traceback.format_exc()}")

    def log(self, text: str) -> None:
        """Report an error in the editor's log (from any thread)."""
        assert self._loop is not None, "log() before start_index()"
        self._loop.call_soon_threadsafe(self.window_log_message, types.LogMessageParams(types.MessageType.Error, f"cglint: {text}"))

    # --- diagnostics ------------------------------------------------------------
    def schedule(self, uri: str, delay: float) -> None:
        """Check `uri` once the editor has been idle for `delay` seconds."""
        loop = asyncio.get_running_loop()
        pending = self._timers.pop(uri, None)
        if pending is not None:
            pending.cancel()
        self._timers[uri] = loop.call_later(delay, lambda: loop.create_task(self.check(uri)))

    async def check(self, uri: str) -> None:
        self._timers.pop(uri, None)
        document = self.workspace.text_documents.get(uri)
        if document is None:
            return
        path = resolved(Path(document.path))
        try:
            await self.in_worker(self._check_in_worker, path, self.sources())
        except Exception:  # noqa: BLE001 - the server outlives a failed check
            self.log(f"checking {path} failed:\n{traceback.format_exc()}")
            return
        self.publish(always=uri)

    def _check_in_worker(self, path: Path, sources: dict[Path, str]) -> None:
        if self.index is not None and self.index.checks(path):
            self.index.check(path, sources)

    async def recheck_all(self) -> None:
        """Index the project again, then check every open buffer against it."""
        await self.in_worker(self.reindex)
        for uri in [doc.uri for doc in self.open_documents().values()]:
            await self.check(uri)

    def publish(self, always: Optional[str] = None) -> None:
        """Publish the diagnostics of every open document whose diagnostics changed."""
        for path, document in self.open_documents().items():
            checked = self.index is not None and self.index.checks(path)
            found = [diagnostic(f, document, self.docs_url) for f in self.index.findings_in(path)] if checked and self.index else []
            if document.uri == always or self._published.get(document.uri) != found:
                self._published[document.uri] = found
                self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=document.uri, version=document.version, diagnostics=found))

    def forget(self, uri: str) -> None:
        pending = self._timers.pop(uri, None)
        if pending is not None:
            pending.cancel()
        if self._published.pop(uri, None):
            self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    # --- code actions -------------------------------------------------------------
    def code_actions(self, params: types.CodeActionParams, sources: dict[Path, str]) -> list[types.CodeAction]:
        document = self.workspace.text_documents.get(params.text_document.uri)
        index = self.index
        if document is None or index is None:
            return []
        path = resolved(Path(document.path))
        fixes: dict[Optional[str], Optional[str]] = {}

        def fixed(code: Optional[str]) -> Optional[str]:
            if code not in fixes:
                fixes[code] = index.fixed_text(path, sources, code)
            return fixes[code]

        found: list[types.CodeAction] = []
        for diag in params.context.diagnostics:
            if diag.source == SOURCE and diag.code:
                found += [a for a in (actions.fix(document, diag, fixed), actions.noqa(document, diag)) if a is not None]
        wanted = params.context.only or []
        if any(actions.FIX_ALL.startswith(kind) for kind in wanted):
            action = actions.fix_all(document, fixed)
            if action is not None:
                found.append(action)
        return found


server = CglintServer()


@server.feature(types.INITIALIZED)
def initialized(ls: CglintServer, params: types.InitializedParams) -> None:
    options = ls.initialization_options
    if options.get("docsUrl"):
        ls.docs_url = options["docsUrl"]
    if isinstance(options.get("debounceMs"), (int, float)):
        ls.debounce = max(options["debounceMs"], 0) / 1000
    ls.start_index(Path(ls.workspace.root_path or os.getcwd()).resolve())


@server.feature(types.INITIALIZE)
def initialize(ls: CglintServer, params: types.InitializeParams) -> None:
    ls.initialization_options = params.initialization_options if isinstance(params.initialization_options, dict) else {}


@server.feature(types.SHUTDOWN)
def shutdown(ls: CglintServer, params: None) -> None:
    ls.shutdown_requested = True


@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
def did_open(ls: CglintServer, params: types.DidOpenTextDocumentParams) -> None:
    ls.schedule(params.text_document.uri, 0)


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
def did_change(ls: CglintServer, params: types.DidChangeTextDocumentParams) -> None:
    ls.schedule(params.text_document.uri, ls.debounce)


@server.feature(types.TEXT_DOCUMENT_DID_SAVE)
async def did_save(ls: CglintServer, params: types.DidSaveTextDocumentParams) -> None:
    await ls.recheck_all()


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: CglintServer, params: types.DidCloseTextDocumentParams) -> None:
    ls.forget(params.text_document.uri)


@server.feature(
    types.TEXT_DOCUMENT_CODE_ACTION,
    types.CodeActionOptions(code_action_kinds=[types.CodeActionKind.QuickFix, actions.FIX_ALL]),
)
async def code_action(ls: CglintServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    return await ls.in_worker(ls.code_actions, params, ls.sources())


def serve() -> int:
    """Serve one editor over stdin and stdout until it exits. Returns the exit status the
    LSP specification asks for: 0 if a `shutdown` request came before the end (the `exit`
    notification or the editor closing the connection), 1 otherwise."""
    import sys

    from cglint import check

    check.KEEP_TREES = False  # the command line keeps a run's trees until it exits; a server would keep every run's
    server.start_io()  # pygls ends it with SystemExit, which start_io swallows, and closes stdout
    if sys.stdout is not None and sys.stdout.closed:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - nothing more can be said; silence the flushes at exit
    return 0 if server.shutdown_requested else 1
