"""The semantics matrix: built from the op table, run on the real targets, rendered, and the copy
in docs/ current.

The tests of this subject that run in-process are in tests/unit/reporting/test_matrix.py.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from harness.case.case_file import load_case
from harness.reporting.matrix import build, render_markdown, write
from harness.targets.registry import open_runner
from tests.conftest import ROOT

DOCS = ROOT / "docs" / "matrix"


#: The columns of docs/matrix: the Makefile's MATRIX_TARGETS.
MATRIX_TARGETS = next(
    line.split(":=", 1)[1].strip().split(",")
    for line in (ROOT / "Makefile").read_text().splitlines()
    if line.startswith("MATRIX_TARGETS")
)


@pytest.fixture(scope="module")
def matrix():
    # The CPU targets, as `make matrix` writes docs/matrix (every build has them).
    runner, found = open_runner(MATRIX_TARGETS)
    try:
        missing = {"torch:cpu", "candle:cpu", "burn:flex"} - set(runner.ids)
        if missing:
            pytest.fail(
                f"targets missing: {sorted(missing)} ({dict(found.unavailable)}); build the probes with `make probes`"
            )
        yield build(runner)
    finally:
        runner.close()


def _cell(m, method, op_class, target):
    k = next(i for i, r in enumerate(m.rows) if (r.method, r.op_class) == (method, op_class))
    return m.cells[k][target], m.differs(k, target)


def test_cells_say_what_each_framework_documents(matrix):
    assert _cell(matrix, "clone", "write", "torch:cpu") == ("keeps", False)  # torch clone copies
    assert _cell(matrix, "alias", "step", "torch:cpu") == ("follows", False)
    assert _cell(matrix, "clone", "write", "candle:cpu") == ("follows", True)  # candle clone: one storage
    assert _cell(matrix, "copy", "write", "candle:cpu") == ("keeps", True)  # candle copy() copies on the CPU
    assert _cell(matrix, "alias", "write", "burn:flex") == ("keeps", True)  # burn: value semantics
    assert _cell(matrix, "clone", "move", "burn:flex") == ("unchanged", True)  # to_device stops training
    assert _cell(matrix, "deepcopy", "write", "candle:cpu") == ("unsupported", True)


def test_rendered_with_cases_and_html(matrix, tmp_path):
    write(matrix, tmp_path)
    md = (tmp_path / "matrix.md").read_text()
    # Each cell names the call as the framework's reproducer spells it, then the verdict.
    # columns: torch:cpu, its variants +foreach and +compile, then candle:cpu
    assert (
        "| `clone` | write | `w.clone()` keeps | `w.clone()` keeps | `w.clone()` keeps | `w.clone()` **follows** |"
        in md
    )
    assert (
        "| `detach` | write | `w.detach()` follows | `w.detach()` follows | `w.detach()` follows "
        "| `w.as_tensor().detach()` follows |" in md
    )
    case = load_case(tmp_path / "cases" / "clone--write.toml")
    assert [op["op"] for op in case.ops] == ["snapshot", "write"]
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.fail("chromium is needed (Debian/Ubuntu: apt-get install -y chromium)")
    r = subprocess.run(
        [
            exe,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--dump-dom",
            (tmp_path / "matrix.html").as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert '<table class="matrix">' in r.stdout
    assert 'class="mono differs"><code>w.clone()</code> follows</td>' in r.stdout


def test_the_matrix_in_docs_is_current(matrix):
    # Regenerate with `make matrix` after changing the op table or a probe.
    assert (DOCS / "matrix.md").read_text() == render_markdown(matrix), (
        "docs/matrix/matrix.md is stale: run `make matrix`"
    )
    assert sorted(p.name for p in (DOCS / "cases").glob("*.toml")) == sorted(f"{r.stem}.toml" for r in matrix.rows)
