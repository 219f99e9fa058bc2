"""``aliasfuzz matrix --out``: the folder is checked before any target starts, and a file that
``aliasfuzz matrix`` did not write is never overwritten.

The choice: ``matrix.md`` and ``matrix.html`` carry a marker line (``MARKER``, an HTML comment)
that only ``aliasfuzz matrix`` writes. ``--out`` may be a new or empty folder, or one whose pages
carry the marker (an earlier run, ``docs/matrix``); anything else is refused with one line, exit 2.
The TEST DOUBLE fake probe stands in as the ``candle`` binary so that a matrix is quick to build.

The tests of this subject that run in-process are in tests/unit/reporting/test_matrix_output.py.
"""

from __future__ import annotations

from harness.reporting.matrix import MARKER
from tests.conftest import run_cli
from tests.support.fake_targets import fake_probe_dir


def matrix(tmp_path, out, timeout: float = 120):
    return run_cli("matrix", "--targets", "candle", "--out", str(out), env=fake_probe_dir(tmp_path), timeout=timeout)


def test_a_new_folder_gets_marked_pages_and_a_second_run_replaces_them(tmp_path):
    out = tmp_path / "m"
    r = matrix(tmp_path, out)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (out / "matrix.md").read_text().splitlines()[0] == MARKER
    assert MARKER in (out / "matrix.html").read_text().splitlines()[:2]
    (out / "matrix.md").write_text((out / "matrix.md").read_text() + "stale line\n")
    r = matrix(tmp_path, out)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "stale line" not in (out / "matrix.md").read_text()
