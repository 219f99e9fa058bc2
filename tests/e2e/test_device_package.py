"""The device package (``make device-package``) and its one command, ``run.sh``.

A CUDA build takes longer than the suite may (docs/DEVICES.md gives its cost), so these tests
package the CPU build's probes instead (``--probes-from``): the same layout, the same wheels, the
same ``run.sh``. They run the script as a GPU machine would, from the package's own wheels with
the probes it carries, here where CUDA is absent, and check that it says so and still runs every
step on the targets that remain.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness import device_package
from harness.paths import probe_binary
from tests.conftest import ROOT

CPU_PROBES = probe_binary("candle_probe").parent


def _driver_loads() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("device") / "package"
    done = subprocess.run(
        [sys.executable, "-m", "harness.device_package", "--probes-from", str(CPU_PROBES), "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert f"{out}: " in done.stdout
    return out


@pytest.fixture(scope="module")
def check(package, tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """``run.sh`` with a 15-second campaign, from a folder outside the checkout, with none of
    the checkout's paths in its environment: only the package's wheels can supply ``harness``."""
    out = tmp_path_factory.mktemp("check") / "out"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ALIASFUZZ_PROBE_DIR", "CARGO_TARGET_DIR")}
    done = subprocess.run(
        [str(package / "run.sh"), str(out)],
        cwd=out.parent,
        env={**env, "PYTHON": sys.executable, "BUDGET": "15s"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    return done, out


def test_the_package_lists_every_file_it_holds_and_fits_the_limit(package):
    manifest = json.loads((package / "MANIFEST.json").read_text())
    assert manifest["format"] == "aliasfuzz-device-package/1"
    assert manifest["features"] == []  # the CPU build's probes, not the CUDA ones
    on_disk = {str(p.relative_to(package)): p.stat().st_size for p in package.rglob("*") if p.is_file()}
    assert {name: size for name, size in on_disk.items() if name != "MANIFEST.json"} == manifest["files"]
    assert sum(on_disk.values()) <= device_package.SIZE_LIMIT
    assert {"bin/candle_probe.gz", "bin/burn_probe.gz", "lib/libvulkan.so.1", "run.sh"} <= set(on_disk)
    assert set(manifest["unpacked"]) == {"bin/candle_probe", "bin/burn_probe"}
    assert {f"cases/{case}" for case in device_package.P11_CASES} <= set(on_disk)
    wheels = sorted(name.split("/")[1].split("-")[0] for name in on_disk if name.startswith("wheels/"))
    assert wheels == ["aliasfuzz", "subprocess_tee", "tomli_w"]
    assert os.access(package / "run.sh", os.X_OK)


def test_run_sh_says_whether_cuda_is_here_and_runs_every_step(check):
    done, out = check
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    summary = (out / "summary.txt").read_text()
    if _driver_loads():
        assert "CUDA absent" not in summary
    else:
        assert "CUDA absent: no NVIDIA driver here (libcuda.so.1 does not load" in summary
        assert "CUDA targets: none; the p11 cases and the campaign run on the other targets alone." in summary
    # The harness ran from the package's wheel, installed beside the results, with the probes
    # the package carries, unpacked there.
    assert (out / "site" / "harness" / "baseline.toml").exists()
    assert sorted(p.name for p in (out / "bin").iterdir()) == ["burn_probe", "candle_probe"]
    found = {t["id"] for t in json.loads((out / "targets.json").read_text())["targets"]}
    assert {"torch:cpu", "candle:cpu", "burn:flex"} <= found
    wgpu = "burn:wgpu" in found
    assert ("device check: burn's GPU backend on Vulkan: burn:wgpu" in summary) == wgpu
    p11 = (out / "p11.txt").read_text()
    for case in device_package.P11_CASES:
        assert f"/cases/{case}" in p11
    assert "b_copy (copy)" in p11 and "torch:cpu" in p11 and "candle:cpu" in p11
    assert ("burn:wgpu" in p11) == wgpu
    campaign = json.loads((out / "campaign" / "campaign.json").read_text())
    assert campaign["programs"] > 0
    assert (out / "campaign" / "report.md").exists()
    assert summary.rstrip().endswith(f"device check: done: {out}")


def test_run_sh_refuses_an_interpreter_that_is_not_there(package, tmp_path):
    done = subprocess.run(
        [str(package / "run.sh"), str(tmp_path / "out")],
        env={**os.environ, "PYTHON": str(tmp_path / "no-python")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert (
        done.stdout.strip()
        == f"device check: {tmp_path / 'no-python'}: not found (PYTHON=... names the interpreter with PyTorch)"
    )


def test_a_package_over_the_limit_is_refused_by_name(tmp_path, monkeypatch):
    monkeypatch.setattr(device_package, "SIZE_LIMIT", 1024 * 1024)
    with pytest.raises(device_package.PackageError, match=rf"^{tmp_path / 'package'}: .* MiB, over the 1 MiB limit$"):
        device_package.package(tmp_path / "package", CPU_PROBES)
