"""Text from a case, a finding or a store is written as text, never as code or markup: the
reproducers (Python, Rust), report.md and the issue drafts, and what ``triage`` prints.

A hostile run folder (its case's title, its repro JSON's statuses and messages, its finding's
fields) is reported with ``aliasfuzz report`` in a real process; the torch reproducer is parsed
with ``ast`` and run with the venv's python (a planted statement would write a marker file and
exit 99), the Rust ones are parsed by ``rustfmt`` (no cargo build), the Markdown is rendered by
markdown-it-py (rich's own dependency) with HTML on.

The tests of this subject that run in-process are in tests/unit/test_hostile_text.py.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
import tomllib
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.conftest import need, run_cli
from tests.support.cases import HOSTILE, HOSTILE_CASE, MARKER_NAME, PY_PAYLOAD, RS_PAYLOAD
from tests.support.run_folders import make_run, record

TARGETS = ["torch:cpu", "candle:cpu", "burn:flex"]


def _repro() -> dict:
    """Every target reports op 1 and 3 with a hostile status and message (a probe's answer, or
    another machine's stored repro JSON)."""
    ops = [
        {"status": "ok"},
        {"status": f"error\n{PY_PAYLOAD}\n{RS_PAYLOAD}", "message": HOSTILE},
        {"status": "ok"},
        {"status": "unsupported", "message": HOSTILE},
    ]
    return {"targets": {t: {"status": "ok", "ops": ops} for t in TARGETS}}


def _hostile_run(tmp_path: Path) -> tuple[Path, str]:
    rec = record(
        1,
        targets=TARGETS,
        sentence=HOSTILE,
        detail=HOSTILE + "\n```\n" + HOSTILE,
        kind="framework <img src=x onerror=alert(1)>",
        op="scale`` <b>x</b>",
    )
    run = make_run(tmp_path / "run", [rec])
    (run / rec["case"]).write_text(HOSTILE_CASE, encoding="utf-8")
    (run / rec["repro"]).write_text(json.dumps(_repro()), encoding="utf-8")
    r = run_cli("report", str(run))
    assert r.returncode == 0, r.stdout + r.stderr
    return run, rec["case"][: -len(".toml")]


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory) -> tuple[Path, str]:
    return _hostile_run(tmp_path_factory.mktemp("hostile"))


def _benign_script(tmp_path: Path) -> str:
    """The torch reproducer of the same program with a plain title and plain messages."""
    from harness.case.case_file import load_case
    from harness.targets.torch.reproducer import torch_script

    plain = tmp_path / "plain.toml"
    plain.write_text(HOSTILE_CASE.replace(f"title = {json.dumps(HOSTILE)}", 'title = "plain"'), encoding="utf-8")
    repro = _repro()
    for t in repro["targets"].values():
        # The same status as the hostile one (not a plain `error`), so the op is the same comment.
        t["ops"][1] = {"status": "error\nplain", "message": "plain"}
        t["ops"][3] = {"status": "unsupported", "message": "plain"}
    return torch_script(load_case(plain))


def test_torch_reproducer_of_a_hostile_case_runs_no_planted_statement(hostile_run, tmp_path):
    run, stem = hostile_run
    script = (run / f"{stem}.torch.py").read_text(encoding="utf-8")
    tree = ast.parse(script)
    docstring = ast.get_docstring(tree, clean=False)
    assert docstring is not None and HOSTILE in docstring  # the title, exactly, as text
    expected = ast.parse(_benign_script(tmp_path))
    assert [ast.dump(s) for s in tree.body[1:]] == [ast.dump(s) for s in expected.body[1:]]
    r = subprocess.run(
        [sys.executable, str(run / f"{stem}.torch.py")], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert not (tmp_path / MARKER_NAME).exists()
    assert r.returncode == 0, r.stderr[-3000:]


def _rust_tokens_outside_comments(src: str) -> list[str]:
    """The lines holding the payload that are not comments (a line comment or a string literal's
    escaped text never has a raw line break, so a payload on its own line is code)."""
    return [line for line in src.split("\n") if RS_PAYLOAD in line and not line.lstrip().startswith("//")]


@pytest.mark.parametrize("framework", ["candle", "burn"])
def test_rust_reproducers_of_a_hostile_case_parse_and_hold_the_text_as_comments(hostile_run, framework):
    if shutil.which("rustfmt") is None:
        need("rustfmt", "rustup component add rustfmt")
    run, stem = hostile_run
    project = run / f"{stem}-{framework}"
    raw = (project / "src" / "main.rs").read_bytes()
    src = raw.decode("utf-8")
    for bad in ("\r", "\u2028", "\u2029", "\u202e", "\x1b"):  # a line ending to some reader; refused by rustc
        assert bad not in src, repr(bad)
    assert not _rust_tokens_outside_comments(src)
    # rustfmt parses the file (stdin: `mod support;` is not followed) without compiling anything.
    r = subprocess.run(
        ["rustfmt", "--edition", "2021", "--emit", "stdout"], input=src, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr[-3000:]
    # The names `c_w` and the save's `c.w` are bound to distinct variables: the transcript makes
    # `.` a `_` and adds a `_` while a variable name is taken (burn's lets carry their type).
    assert re.search(r"let c_w(: [^=]+)? = ", src) and re.search(r"let c_w_(: [^=]+)? = ", src)
    tomllib.loads((project / "Cargo.toml").read_text(encoding="utf-8"))


# ------------------------------------------------------------------------------------------------
# Markdown: report.md and the issue draft, rendered with HTML on.


class _Elements(HTMLParser):
    """The elements and attributes of rendered HTML, and the text of its code blocks."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[str] = []
        self.code: list[str] = []
        self._in_pre = False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [k for k, _ in attrs]
        self._in_pre = self._in_pre or tag == "pre"
        if tag == "code" and self._in_pre:
            self.code.append("")

    def handle_endtag(self, tag):
        if tag == "pre":
            self._in_pre = False

    def handle_data(self, data):
        if self._in_pre and self.code:
            self.code[-1] += data


def _render(md: str) -> _Elements:
    from markdown_it import MarkdownIt

    page = MarkdownIt("commonmark", {"html": True}).enable("table").render(md)
    parsed = _Elements()
    parsed.feed(page)
    return parsed


def test_report_md_and_draft_carry_no_markup_from_a_finding(hostile_run):
    run, stem = hostile_run
    for path in (run / "report.md", run / f"{stem}.issue.md"):
        md = path.read_text(encoding="utf-8")
        assert "\x1b" not in md and "\r" not in md, path
        html = _render(md)
        assert not {"script", "img", "b"} & set(html.tags), (path, set(html.tags))
        assert not [a for a in html.attrs if a.startswith("on")], path
    draft = _render((run / f"{stem}.issue.md").read_text(encoding="utf-8"))
    # Fences intact: the reproducer, what it prints, the detail (with its own ``` inside), the case,
    # the commands.
    assert len(draft.code) == 5, draft.code
    assert "fn main()" in draft.code[0] and draft.code[1].startswith("(candle:cpu)")
    assert "```" in draft.code[2] and "<script>" in draft.code[2]
    assert draft.code[3].startswith("format = ") and draft.code[4].startswith("aliasfuzz repro ")
