"""Reliability: every fault is injected into a real run, which must finish, record the fault as a
finding or a clear log line, and lose nothing it had already found.

Faults come from the TEST DOUBLE fake probe's switches (tests/fakes/fake_probe.py), from the real
PyTorch worker's fault hook (``ALIASFUZZ_TORCH_FAULT``), from outside (SIGKILL), from the file
system (a tiny tmpfs that fills up), and from malformed case files. Where a campaign is needed,
the fake probe stands in as the ``candle`` binary through ``ALIASFUZZ_PROBE_DIR`` (harness logic
under test, never a framework stand-in).

The tests here run in this process (the command line through ``run_cli_in_process``), as the
unit tier requires; those that need real processes are in tests/e2e/test_reliability.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.fuzzing.campaign import RunFolder
from tests.conftest import run_cli_in_process
from tests.support.cases import BAD_CASES
from tests.support.fake_targets import probe_dir

# -- whole campaigns ----------------------------------------------------------------------------


def _fuzz(tmp_path: Path, out: Path, *flags: str, budget=("--max-programs", "64")):
    probes = probe_dir(tmp_path, *flags)
    return run_cli_in_process(
        "fuzz",
        *budget,
        "--seed",
        "7",
        "--profile",
        "quick",
        "--targets",
        "candle",
        "--shrink-time",
        "5",
        "--chunk-size",
        "32",
        "--out",
        str(out),
        "--no-report",
        env={"ALIASFUZZ_PROBE_DIR": str(probes)},
        timeout=600,
    )


def test_journal_torn_by_a_crash_gets_a_fresh_line(tmp_path: Path):
    folder = RunFolder(tmp_path / "run")
    folder.create()
    records: list[dict] = []
    folder.add_finding({"signature": "a"}, "#\n", "#\n", None, records)
    with open(folder.journal, "a") as f:
        f.write('{"signature": "torn')  # a write cut short
    folder.add_finding({"signature": "b"}, "#\n", "#\n", None, records)
    assert [r["signature"] for r in folder.load_findings()] == ["a", "b"]


def test_unwritable_out_folder_is_one_line(tmp_path: Path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    result = _fuzz(tmp_path, blocker / "run")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "cannot write the run folder" in result.stderr


# -- malformed case files: repro and minimize ---------------------------------------------------

EXTRA_BAD = {
    "empty": (b"", "format", "must be"),
    "not_utf8": (b'format = "\xff\xfe"\n', "", "UTF-8"),
    "binary": (bytes(range(256)), "", ""),
}


def _bad_case(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.toml"
    if name in BAD_CASES:
        path.write_text(BAD_CASES[name][0])
    elif name == "directory":
        path.mkdir()
    elif name != "absent":
        path.write_bytes(EXTRA_BAD[name][0])
    return path


ALL_BAD = sorted(BAD_CASES) + sorted(EXTRA_BAD) + ["directory", "absent"]


@pytest.mark.parametrize("command", ["repro", "minimize"])
@pytest.mark.parametrize("name", ALL_BAD)
def test_every_malformed_case_is_one_line_exit_2(tmp_path: Path, capsys, command: str, name: str):
    from harness.cli import main

    path = _bad_case(tmp_path, name)
    status = main([command, str(path), "--targets", "torch:cpu"])
    captured = capsys.readouterr()
    assert status == 2, captured
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("aliasfuzz: ") and str(path) in lines[0], captured.err
    if name in BAD_CASES:
        _, where, fragment = BAD_CASES[name]
        assert where in lines[0] and fragment in lines[0]
    elif name in EXTRA_BAD:
        assert EXTRA_BAD[name][2] in lines[0]
    assert captured.out == ""


@pytest.mark.parametrize("name", ["bad_toml", "unknown_op", "not_utf8", "directory"])
def test_minimize_cli_malformed_case_one_line(tmp_path: Path, name: str):
    path = _bad_case(tmp_path, name)
    result = run_cli_in_process("minimize", str(path), "--targets", "torch:cpu")
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert not path.with_suffix(".min.toml").exists()
