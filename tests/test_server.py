"""`cglint server` end to end: a real LSP client (pytest-lsp) drives the server over stdio on a
small project where a capture in one file reaches hazards in another."""
from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

pytest_lsp = pytest.importorskip("pytest_lsp")
from lsprotocol import types  # noqa: E402
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities  # noqa: E402

MODEL = """\
import torch
from torch import nn


class Decoder(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        h = self.proj(x)
        scale = h.abs().max().item()
        return h / scale

    def noisy(self, x):
        return x + torch.randn(x.shape).cuda()
"""

RUN = """\
import torch

from model import Decoder


def build(dim, static_x):
    model = Decoder(dim).cuda()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            model(static_x)
            model.noisy(static_x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = model(static_x)
        static_z = model.noisy(static_x)
    return graph, static_y, static_z
"""

BROKEN = """\
import torch
g = torch.cuda.CUDAGraph()

def step(x:
    return x
"""


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "cglint", "server"]))
async def client(lsp_client: LanguageClient, tmp_path: Path):
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "run.py").write_text(RUN)
    (tmp_path / "broken.py").write_text(BROKEN)
    params = types.InitializeParams(
        capabilities=client_capabilities("visual-studio-code"),
        root_uri=tmp_path.as_uri(),
        workspace_folders=[types.WorkspaceFolder(uri=tmp_path.as_uri(), name="project")],
        initialization_options={"docsUrl": "https://example.org/rules.md"},
    )
    await lsp_client.initialize_session(params)
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "cglint", "server"]))
async def misconfigured(lsp_client: LanguageClient, tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text('[tool.cglint]\nselect = "CG1"\n')
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "run.py").write_text(RUN)
    await lsp_client.initialize_session(types.InitializeParams(capabilities=client_capabilities("neovim"), root_uri=tmp_path.as_uri()))
    yield
    await lsp_client.shutdown_session()


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[sys.executable, "-m", "cglint", "server"]))
async def patient(lsp_client: LanguageClient, tmp_path: Path):
    """A server that waits two seconds after the last change: longer than sending a few takes."""
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "run.py").write_text(RUN)
    params = types.InitializeParams(capabilities=client_capabilities("neovim"), root_uri=tmp_path.as_uri(),
                                    initialization_options={"debounceMs": 2000})
    await lsp_client.initialize_session(params)
    yield
    await lsp_client.shutdown_session()


class Publications(dict):
    """The client's diagnostics by URI, also keeping which URI each publication was for."""

    def __init__(self) -> None:
        super().__init__()
        self.uris: list[str] = []

    def __setitem__(self, uri: str, diagnostics) -> None:
        self.uris.append(uri)
        super().__setitem__(uri, diagnostics)


async def published(client: LanguageClient, uri: str, send=None) -> list[types.Diagnostic]:
    """The diagnostics the server publishes for `uri` after `send()` (without `send`: the
    next ones, the client having forgotten the last)."""
    if send is not None:
        client.diagnostics.pop(uri, None)
        send()
    for _ in range(6000):  # a bound against a hung server, not a speed requirement
        if uri in client.diagnostics:
            return list(client.diagnostics[uri])
        await asyncio.sleep(0.01)
    raise AssertionError(f"no diagnostics for {uri}")


def open_file(client: LanguageClient, path: Path):
    item = types.TextDocumentItem(uri=path.as_uri(), language_id="python", version=1, text=path.read_text())
    return published(client, path.as_uri(), lambda: client.text_document_did_open(types.DidOpenTextDocumentParams(item)))


def change(client: LanguageClient, path: Path, version: int, text: str):
    params = types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=path.as_uri(), version=version),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
    )
    return published(client, path.as_uri(), lambda: client.text_document_did_change(params))


def span(line: int, start: int, end: int) -> types.Range:
    return types.Range(start=types.Position(line, start), end=types.Position(line, end))


def at(path: Path, line: int) -> types.Location:
    return types.Location(uri=path.resolve().as_uri(), range=span(line, 0, 0))


@pytest.mark.asyncio
async def test_hazards_reached_from_a_capture_in_another_file(client: LanguageClient, tmp_path: Path):
    found = await open_file(client, tmp_path / "model.py")
    model, run = tmp_path / "model.py", tmp_path / "run.py"
    chain = [
        types.DiagnosticRelatedInformation(at(run, 15), "captured: with torch.cuda.graph(graph)"),
    ]
    assert [(d.code, d.range, d.severity, d.source, d.code_description.href) for d in found] == [
        ("CG101", span(11, 16, 36), types.DiagnosticSeverity.Error, "cglint", "https://example.org/rules.md#cg101"),
        ("CG303", span(15, 19, 46), types.DiagnosticSeverity.Error, "cglint", "https://example.org/rules.md#cg303"),
    ]
    assert list(found[0].related_information) == chain + [
        types.DiagnosticRelatedInformation(at(run, 16), "-> model(static_x)"),
        types.DiagnosticRelatedInformation(at(model, 9), "-> Decoder.forward"),
    ]
    assert list(found[1].related_information) == chain + [
        types.DiagnosticRelatedInformation(at(run, 17), "-> model.noisy(static_x)"),
        types.DiagnosticRelatedInformation(at(model, 14), "-> Decoder.noisy"),
    ]
    assert found[0].message.startswith("`h.abs().max().item()` copies a tensor value to the host")
    assert "\nFix: " in found[0].message


@pytest.mark.asyncio
async def test_editing_the_hazard_away_clears_it_without_saving(client: LanguageClient, tmp_path: Path):
    model = tmp_path / "model.py"
    await open_file(client, model)
    text = MODEL.replace("scale = h.abs().max().item()", "scale = h.abs().max()")
    assert [d.code for d in await change(client, model, 2, text)] == ["CG303"]
    text = text.replace("torch.randn(x.shape).cuda()", 'torch.randn(x.shape, device="cuda")')
    assert await change(client, model, 3, text) == []
    assert model.read_text() == MODEL  # checked from the buffer, never written


@pytest.mark.asyncio
async def test_editing_the_capture_updates_the_file_it_reaches(client: LanguageClient, tmp_path: Path):
    model, run = tmp_path / "model.py", tmp_path / "run.py"
    assert len(await open_file(client, model)) == 2
    await open_file(client, run)
    # The capture no longer calls noisy(): its hazard is not captured any more.
    edited = RUN.replace("        static_z = model.noisy(static_x)\n", "").replace(", static_z\n", "\n")
    client.diagnostics.pop(model.as_uri())
    assert await change(client, run, 2, edited) == []
    assert [d.code for d in await published(client, model.as_uri())] == ["CG101"]


@pytest.mark.asyncio
async def test_changes_while_typing_are_checked_once_after_the_last(patient: LanguageClient, tmp_path: Path):
    model = tmp_path / "model.py"
    await open_file(patient, model)
    patient.diagnostics = Publications()
    without_item = MODEL.replace("scale = h.abs().max().item()", "scale = h.abs().max()")
    for version, text in ((2, without_item), (3, MODEL), (4, without_item)):
        patient.text_document_did_change(types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=model.as_uri(), version=version),
            content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)],
        ))
    assert [d.code for d in await published(patient, model.as_uri())] == ["CG303"]  # the last text's
    # A code action runs in the checking thread after every check already asked for.
    context = types.CodeActionContext(diagnostics=[])
    await patient.text_document_code_action_async(types.CodeActionParams(types.TextDocumentIdentifier(model.as_uri()), span(0, 0, 0), context))
    assert patient.diagnostics.uris == [model.as_uri()]


@pytest.mark.asyncio
async def test_code_actions_add_noqa_and_apply_the_safe_fix(client: LanguageClient, tmp_path: Path):
    model = tmp_path / "model.py"
    cg101, cg303 = await open_file(client, model)
    uri = model.as_uri()

    def request(diagnostic, only=None):
        context = types.CodeActionContext(diagnostics=[diagnostic], only=only)
        return client.text_document_code_action_async(types.CodeActionParams(types.TextDocumentIdentifier(uri), diagnostic.range, context))

    def edits(action):
        (change,) = action.edit.document_changes
        assert change.text_document.uri == uri
        return [(e.range, e.new_text) for e in change.edits]

    actions = await request(cg303)
    assert [(a.title, a.kind, a.is_preferred) for a in actions] == [
        ("Fix CG303 cpu-rng-to-device (safe fix)", types.CodeActionKind.QuickFix, True),
        ("Add `# noqa: CG303`", types.CodeActionKind.QuickFix, None),
    ]
    line_16 = types.Range(types.Position(15, 0), types.Position(16, 0))
    assert edits(actions[0]) == [(line_16, '        return x + torch.randn(x.shape, device="cuda")\n')]
    assert edits(actions[1]) == [(line_16, "        return x + torch.randn(x.shape).cuda()  # noqa: CG303\n")]
    # CG101 has no automatic fix: only the comment is offered.
    (comment,) = await request(cg101)
    assert edits(comment) == [(types.Range(types.Position(11, 0), types.Position(12, 0)), "        scale = h.abs().max().item()  # noqa: CG101\n")]
    # The comment silences the finding.
    text = MODEL.replace("scale = h.abs().max().item()", "scale = h.abs().max().item()  # noqa: CG101")
    assert [d.code for d in await change(client, model, 2, text)] == ["CG303"]
    (cg303,) = client.diagnostics[uri]
    fix_all = [a for a in await request(cg303, only=[types.CodeActionKind.SourceFixAll]) if a.kind == "source.fixAll.cglint"]
    assert [edits(a) for a in fix_all] == [[(line_16, '        return x + torch.randn(x.shape, device="cuda")\n')]]


@pytest.mark.asyncio
async def test_a_syntax_error_is_one_diagnostic_and_the_server_goes_on(client: LanguageClient, tmp_path: Path):
    broken = tmp_path / "broken.py"
    (found,) = await open_file(client, broken)
    assert (found.code, found.range.start.line, found.severity) == ("CG002", 3, types.DiagnosticSeverity.Error)
    assert found.code_description.href == "https://example.org/rules.md"
    assert await change(client, broken, 2, BROKEN.replace("def step(x:", "def step(x):")) == []
    assert len(await open_file(client, tmp_path / "model.py")) == 2


@pytest.mark.asyncio
async def test_saving_checks_the_project_again(client: LanguageClient, tmp_path: Path):
    model = tmp_path / "model.py"
    clean = MODEL.replace("scale = h.abs().max().item()", "scale = h.abs().max()").replace("torch.randn(x.shape).cuda()", "x")
    model.write_text(clean)
    assert await open_file(client, model) == []
    # A hazard in a function that only another file's capture reaches: found once saved.
    hazard = clean.replace("        return h / scale\n", "        print(h)\n        return h / scale\n")
    await change(client, model, 2, hazard)
    model.write_text(hazard)
    saved = types.DidSaveTextDocumentParams(types.TextDocumentIdentifier(model.as_uri()))
    found = await published(client, model.as_uri(), lambda: client.text_document_did_save(saved))
    assert [(d.code, d.range) for d in found] == [("CG103", span(12, 8, 16))]


@pytest.mark.asyncio
async def test_a_broken_configuration_is_shown_and_the_defaults_apply(misconfigured: LanguageClient, tmp_path: Path):
    assert [d.code for d in await open_file(misconfigured, tmp_path / "model.py")] == ["CG101", "CG303"]
    assert [(m.type, m.message) for m in misconfigured.messages] == [
        (types.MessageType.Error, f"cglint: {tmp_path / 'pyproject.toml'} [tool.cglint]: `select` must be a list of strings; using the default settings")
    ]


def test_without_pygls_the_command_says_what_to_install(monkeypatch, capsys):
    from cglint.cli import main

    monkeypatch.setitem(sys.modules, "pygls", None)  # as if not installed: importing it fails
    assert main(["server"]) == 2
    assert capsys.readouterr().err == 'cglint: error: `cglint server` needs pygls: pip install "cglint[server]"\n'


def _lsp_messages(*messages: dict) -> bytes:
    import json

    out = b""
    for message in messages:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        out += b"Content-Length: %d\r\n\r\n" % len(body) + body
    return out


@pytest.mark.parametrize("shutdown, status", [(True, 0), (False, 1)])
def test_the_exit_status_is_the_one_the_specification_asks_for(tmp_path: Path, shutdown: bool, status: int):
    """`exit` after `shutdown` ends the process with 0, `exit` alone with 1 (LSP
    specification), and neither leaves a traceback behind."""
    import subprocess

    messages = [
        {"id": 1, "method": "initialize", "params": {"processId": None, "rootUri": tmp_path.as_uri(), "capabilities": {}}},
        {"method": "initialized", "params": {}},
        *([{"id": 2, "method": "shutdown"}] if shutdown else []),
        {"method": "exit"},
    ]
    done = subprocess.run([sys.executable, "-m", "cglint", "server"], input=_lsp_messages(*messages), cwd=tmp_path, capture_output=True, timeout=120)
    assert (done.returncode, done.stderr.decode()) == (status, "")
    assert b'"id": 1' in done.stdout.replace(b'"id":1', b'"id": 1')
