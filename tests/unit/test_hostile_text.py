"""Text from a case, a finding or a store is written as text, never as code or markup: the
reproducers (Python, Rust), report.md and the issue drafts, and what ``triage`` prints.

A hostile run folder (its case's title, its repro JSON's statuses and messages, its finding's
fields) is reported with ``aliasfuzz report`` in a real process; the torch reproducer is parsed
with ``ast`` and run with the venv's python (a planted statement would write a marker file and
exit 99), the Rust ones are parsed by ``rustfmt`` (no cargo build), the Markdown is rendered by
markdown-it-py (rich's own dependency) with HTML on.

The tests here run in this process (the command line through ``run_cli_in_process``), as the
unit tier requires; those that need real processes are in tests/e2e/test_hostile_text.py.
"""

from __future__ import annotations

import sqlite3
import tomllib

from tests.conftest import run_cli_in_process
from tests.support.cases import HOSTILE
from tests.support.run_folders import make_run, record


def test_rust_and_toml_escapers_round_trip():
    """``toml_str`` is a TOML string of any text (json.dumps writes a surrogate pair for a
    character outside the BMP, which TOML refuses); ``rust_str`` holds no raw line break."""
    from harness.escaping import rust_str, toml_str

    text = HOSTILE + "\U0001f600\x00\x7f"
    assert tomllib.loads(f"k = {toml_str(text)}")["k"] == text
    lit = rust_str(text)
    assert "\n" not in lit and "\r" not in lit and lit.startswith('"') and lit.endswith('"')


# ------------------------------------------------------------------------------------------------
# triage: what it prints of a store.


def test_triage_list_prints_control_characters_as_escapes(tmp_path):
    run = make_run(tmp_path / "run", [record(1, signature="framework|x|\x1b[31mred\x1b[0m\nforged line|y")])
    store = tmp_path / "triage.sqlite"
    r = run_cli_in_process("triage", "--record", str(run), "--store", str(store))
    assert r.returncode == 0, r.stderr
    with sqlite3.connect(store) as db:  # a stored id as another machine may have written it
        assert db.execute("select count(*) from causes").fetchone()[0] == 1
    r = run_cli_in_process("triage", "--store", str(store))
    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout and "forged line" in r.stdout
    lines = r.stdout.strip().split("\n")
    assert len(lines) == 3 and lines[-1] == "1 root causes", lines
