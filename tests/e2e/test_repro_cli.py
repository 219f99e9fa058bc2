"""``aliasfuzz repro`` and ``aliasfuzz targets`` as a user runs them (real processes)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import CASES, ROOT, run_cli


def test_example_case_on_torch_cpu():
    result = run_cli("repro", str(CASES / "example_sgd_snapshots.toml"), "--targets", "torch:cpu", "--json")
    # One target is no comparison: its trace is shown, and the exit status says nothing was compared.
    assert result.returncode == 2 and "only torch:cpu ran the case" in result.stderr, result.stderr
    doc = json.loads(result.stdout)
    assert doc["compared"] is False
    t = doc["targets"]["torch:cpu"]
    assert t["status"] == "ok"
    assert t["final"]["w"] == [[0.5, 1.5]]
    assert t["final"]["buf"] == [[7.0, 7.0], [0.0, 0.0]]
    assert t["verdicts"] == {"s1": "keeps", "b1": "keeps"}
    assert t["versions"]["torch"].startswith("2.15.0")
    assert doc["divergences"] == []
    assert len(t["trace"]) == 4


def test_repro_table_names_targets_and_verdicts():
    result = run_cli("repro", str(CASES / "example_sgd_snapshots.toml"), "--targets", "torch")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "torch:cpu" in out and "torch:cpu+foreach" in out
    assert "s1 (clone)" in out and "keeps" in out and "No divergence" in out


def test_targets_json_lists_torch_with_versions():
    result = run_cli("targets", "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    ids = {t["id"]: t for t in doc["targets"]}
    assert "torch:cpu" in ids and "torch:cpu+foreach" in ids
    assert ids["torch:cpu"]["versions"]["torch"].startswith("2.15.0")
    assert "snapshot" in ids["torch:cpu"]["ops"]


def test_unknown_target_is_a_one_line_error():
    result = run_cli("repro", str(CASES / "example_sgd_snapshots.toml"), "--targets", "torch:tpu")
    assert result.returncode == 2
    assert "torch:tpu" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_stale_probe_is_reported_with_rebuild_hint(tmp_path):
    """A binary that speaks another protocol version: the user is told to rebuild."""
    import sys

    fake = ROOT / "tests" / "fakes" / "fake_probe.py"
    from harness.targets.base import ProbeProcess, SetupError

    proc = ProbeProcess("candle", [sys.executable, str(fake), "--protocol", "0"])
    with pytest.raises(SetupError) as info:
        proc.start()
    assert "rebuild" in str(info.value) and "make probes" in str(info.value)
    assert "\n" not in str(info.value)
