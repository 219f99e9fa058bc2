"""The device package: what a GPU machine with no network and no Rust needs to run the GPU targets.

``make device-package`` (``python -m harness.device_package``) writes ``dist/device/``:

- ``bin/candle_probe.gz``: candle's probe with its ``cuda`` feature (``candle:cuda``);
- ``bin/burn_probe.gz``: burn's probe with its ``wgpu`` feature, burn's GPU backend on Vulkan
  with fusion, as ``FULL=1`` builds it (``burn:wgpu``). Not ``cuda``: burn 0.22's CUDA runtime
  (cubecl-cuda, through cubecl-llvm) needs LLVM 23, which its build script
  (tracel-llvm-bundler) downloads from GitHub, out of this machine's reach;
- both built in the cargo profile ``device`` (the ``dev`` profile, stripped), so that they never
  replace the CPU build's binaries in the shared target directory; gzipped (candle's CUDA
  kernels are PTX text inside its binary), and unpacked by ``run.sh``;
- ``lib/libvulkan.so.1``: Debian's Vulkan loader, which ``run.sh`` uses where the machine has none;
- ``wheels/``: aliasfuzz's own wheel and the pure-Python packages it needs beyond the ones the
  GPU machine is assumed to have (PyTorch with CUDA, Hypothesis, numpy, and ``rich``);
- ``cases/``: the seed's p11 cases (a snapshot method after an optimizer step and after a row
  write), which say whether ``copy()`` shares on CUDA as it does on Metal;
- ``run.sh``: the one command (``harness/device_run.sh``); ``MANIFEST.json``: what was built,
  with which features and toolkit, and every file's size.

The package stays under :data:`SIZE_LIMIT`; :func:`package` refuses to finish a larger one.

**The CUDA toolkit comes from PyPI.** candle's CUDA build runs ``nvcc`` at build time (its PTX
kernels and a static library of others) and links the CUDA libraries. This machine has no CUDA,
so :func:`prepare_toolkit` lays one out under ``<target>/cuda-toolkit`` from NVIDIA's wheels
(:data:`TOOLKIT_WHEELS`, pinned to CUDA 13.0, the version of the GPU image's ``nvcc`` and
driver). The link-time libraries come from the virtual environment's own NVIDIA wheels
(PyTorch's) and ``nvidia-curand``. The driver library ``libcuda.so`` is a link stub made here:
every driver function cudarc declares, each returning an error. The stub is only linked against;
the binary asks for ``libcuda.so.1``, which on the GPU machine is the driver's own. So candle's
probe starts only where the driver is; burn's starts anywhere and opens Vulkan when asked.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
import zipfile
from pathlib import Path

from harness.build import record_build
from harness.paths import CASES_DIR, PROBES_WORKSPACE, ROOT, cargo_target_dir

DIST = ROOT / "dist" / "device"
SIZE_LIMIT = 64 * 1024 * 1024
# The GPU image's compute capability (Hopper: H100 and H200); candle's static kernels are built for it.
COMPUTE_CAP = "90"
# CUDA 13.0: the GPU image's nvcc and driver (580) are 13.0; cudarc reads the version from nvcc.
TOOLKIT_WHEELS = (
    "nvidia-cuda-nvcc==13.0.88",
    "nvidia-cuda-crt==13.0.88",
    "nvidia-nvvm==13.0.88",
    "nvidia-cuda-runtime==13.0.96",
    "nvidia-cuda-cccl==13.0.85",
    "nvidia-curand==10.4.0.35",
)
# Link names the build asks for -> the shared library that answers to it, found in the toolkit
# or in the virtual environment's NVIDIA wheels (PyTorch's dependencies).
LINK_LIBRARIES = {
    "libcudart.so": "libcudart.so.13",
    "libcublas.so": "libcublas.so.13",
    "libcublasLt.so": "libcublasLt.so.13",
    "libnvrtc.so": "libnvrtc.so.13",
    "libcurand.so": "libcurand.so.10",
}
# The packages aliasfuzz imports that the GPU image is not assumed to have; each is pure Python.
CARRIED_REQUIREMENTS = ("subprocess-tee", "tomli-w")
VULKAN_LOADER_DIRS = (Path("/usr/lib/x86_64-linux-gnu"), Path("/usr/lib64"), Path("/usr/lib"))
P11_CASES = ("methods_across_step.toml", "methods_across_row_write.toml")
# burn's probe carries burn's GPU backend on Vulkan (``wgpu``, with fusion as in FULL=1), not
# ``cuda``: burn 0.22's CUDA runtime (cubecl-cuda) needs LLVM 23, which its build script
# (tracel-llvm-bundler) downloads from GitHub, out of this machine's reach.
PROBES = (("candle_probe", "candle_probe/cuda"), ("burn_probe", "burn_probe/wgpu"))
PROFILE = "device"


class PackageError(Exception):
    """A step of the package could not be done; the message says which and why."""


def toolkit_dir() -> Path:
    return cargo_target_dir() / "cuda-toolkit"


def _pinned(name: str) -> str:
    """The version ``requirements.lock`` pins for ``name`` (the package that runs here is the one carried)."""
    wanted = re.sub(r"[-_.]+", "-", name).lower()
    for line in (ROOT / "requirements.lock").read_text(encoding="utf-8").splitlines():
        pinned, _, version = line.partition("==")
        if version and re.sub(r"[-_.]+", "-", pinned).lower() == wanted:
            return f"{pinned}=={version.strip()}"
    raise PackageError(f"requirements.lock: no pinned version of {name}")


def _pip_download(requirements: list[str], dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "-d", str(dest)]
    done = subprocess.run(cmd + requirements, capture_output=True, text=True)
    if done.returncode != 0:
        raise PackageError(f"pip download {' '.join(requirements)}: {done.stderr.strip().splitlines()[-1:]}")


def _venv_nvidia_lib_dirs() -> list[Path]:
    """The ``lib`` folders of the NVIDIA wheels installed beside PyTorch in this environment."""
    import nvidia  # PyTorch's CUDA wheels install the namespace package ``nvidia``

    return sorted(p for base in nvidia.__path__ for p in Path(base).glob("*/lib") if p.is_dir())


def _cudarc_driver_functions() -> list[str]:
    """Every driver function cudarc's bindings declare, read from its source in cargo's registry."""
    registry = Path(os.environ.get("CARGO_HOME", Path.home() / ".cargo")) / "registry" / "src"
    sources = sorted(registry.glob("*/cudarc-*/src/driver/sys/mod.rs"))
    if not sources:
        raise PackageError(f"{registry}: no cudarc source (run `cargo fetch` in {PROBES_WORKSPACE})")
    names = set(re.findall(r"pub unsafe fn (cu\w+)\(", sources[-1].read_text(encoding="utf-8")))
    if not names:
        raise PackageError(f"{sources[-1]}: no driver function found")
    return sorted(names)


def _driver_stub(lib: Path) -> None:
    """``libcuda.so``, a link stub with the driver's soname: each function returns an error
    (``CUDA_ERROR_STUB_LIBRARY``, 34) should it ever be loaded in place of the driver."""
    source = lib / "cuda_stub.c"
    source.write_text("".join(f"int {name}(void) {{ return 34; }}\n" for name in _cudarc_driver_functions()))
    stub = lib / "stubs" / "libcuda.so"
    stub.parent.mkdir(exist_ok=True)
    cmd = ["cc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(stub), str(source)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise PackageError(f"{source}: the driver stub did not compile: {done.stderr.strip()[-300:]}")


def prepare_toolkit() -> Path:
    """Lays out CUDA 13.0's compiler, headers and link libraries under :func:`toolkit_dir` from
    PyPI's wheels, once: a complete toolkit (its ``.complete`` stamp names the wheels) is kept."""
    root = toolkit_dir()
    stamp = root / ".complete"
    if stamp.exists() and stamp.read_text(encoding="utf-8").split() == list(TOOLKIT_WHEELS):
        return root
    shutil.rmtree(root, ignore_errors=True)
    wheels = cargo_target_dir() / "cuda-wheels"
    _pip_download(list(TOOLKIT_WHEELS), wheels)
    for requirement in TOOLKIT_WHEELS:
        name, version = requirement.split("==")
        (wheel,) = wheels.glob(f"{name.replace('-', '_')}-{version}-*.whl")
        with zipfile.ZipFile(wheel) as archive:
            for member in archive.infolist():
                parts = Path(member.filename).parts
                # Every NVIDIA wheel lays its files out under nvidia/cu13/ (curand's under nvidia/cu13 too).
                if len(parts) < 4 or parts[0] != "nvidia" or member.is_dir():
                    continue
                out = root.joinpath(*parts[2:])
                out.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(member) as src, open(out, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                if parts[2] == "bin" or out.name == "cicc":
                    out.chmod(out.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    lib = root / "lib"
    lib.mkdir(exist_ok=True)
    search = [lib, *_venv_nvidia_lib_dirs()]
    for link, soname in LINK_LIBRARIES.items():
        found = next((d / soname for d in search if (d / soname).exists()), None)
        if found is None:
            raise PackageError(f"{soname}: not in {root / 'lib'} nor in the environment's NVIDIA wheels")
        (lib / link).unlink(missing_ok=True)
        (lib / link).symlink_to(found)
    _driver_stub(lib)
    stamp.write_text("\n".join(TOOLKIT_WHEELS) + "\n", encoding="utf-8")
    return root


def build_probes(toolkit: Path, quiet: bool = False) -> int:
    """Builds both probes in one cargo invocation, in profile ``device``, with :data:`PROBES`'
    features, and records the build in ``<target>/aliasfuzz-builds.jsonl``."""
    env = {
        **os.environ,
        "CARGO_TARGET_DIR": str(cargo_target_dir()),
        "PATH": f"{toolkit / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "CUDA_HOME": str(toolkit),
        "CUDA_PATH": str(toolkit),
        "NVCC": str(toolkit / "bin" / "nvcc"),
        "CUDA_COMPUTE_CAP": os.environ.get("CUDA_COMPUTE_CAP", COMPUTE_CAP),
    }
    features = [feature for _, feature in PROBES]
    cmd = ["cargo", "build", "--profile", PROFILE, "--bins", "--features", ",".join(features)]
    cmd += [arg for probe, _ in PROBES for arg in ("-p", probe)]
    print(f"aliasfuzz device-package: {' '.join(cmd)}", flush=True)
    start = time.monotonic()
    stream = subprocess.DEVNULL if quiet else None
    status = subprocess.run(cmd, cwd=PROBES_WORKSPACE, env=env, stdout=stream, stderr=stream).returncode
    record_build(time.monotonic() - start, features, status, profile=PROFILE)
    print(f"aliasfuzz device-package: build {'ok' if status == 0 else 'FAILED'} in {time.monotonic() - start:.1f}s")
    return status


def _wheels(dest: Path) -> list[Path]:
    """aliasfuzz's wheel, built from this checkout, and the carried requirements' pinned wheels."""
    dest.mkdir(parents=True)
    cmd = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(dest)]
    done = subprocess.run(cmd + [str(ROOT)], capture_output=True, text=True)
    if done.returncode != 0:
        raise PackageError(f"pip wheel {ROOT}: {done.stderr.strip()[-300:]}")
    _pip_download([_pinned(name) for name in CARRIED_REQUIREMENTS], dest)
    return sorted(dest.glob("*.whl"))


def package(out: Path = DIST, probes_from: Path | None = None) -> dict:
    """Writes the package to ``out`` (replacing it) and returns its manifest.

    The probes come from the ``device`` build, or from ``probes_from``: the test suite packages
    the CPU build that way, to run ``run.sh`` where a CUDA build would take too long. The
    manifest's ``features`` say which it was."""
    built = (probes_from or cargo_target_dir() / PROFILE).resolve()
    for probe, _ in PROBES:
        if not (built / probe).exists():
            raise PackageError(f"{built / probe}: not built (make device-package builds it)")
    shutil.rmtree(out, ignore_errors=True)
    (out / "bin").mkdir(parents=True)
    unpacked = {}
    for probe, _ in PROBES:
        binary = out / "bin" / probe
        shutil.copy2(built / probe, binary)
        # The device profile strips already; a binary from elsewhere (the CPU build) is stripped here.
        if probes_from is not None and shutil.which("strip"):
            subprocess.run(["strip", "--strip-all", str(binary)], check=True)
        # candle's CUDA kernels are PTX text inside the binary (about 54 MB stripped): gzip takes
        # it to a quarter, and run.sh unpacks it with Python's gzip module.
        unpacked[f"bin/{probe}"] = binary.stat().st_size
        with open(binary, "rb") as src, gzip.open(f"{binary}.gz", "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst)
        binary.unlink()
    _wheels(out / "wheels")
    # Debian's Vulkan loader, for a GPU machine without one (run.sh uses it only then).
    (out / "lib").mkdir()
    loader = next((d / "libvulkan.so.1" for d in VULKAN_LOADER_DIRS if (d / "libvulkan.so.1").exists()), None)
    if loader is None:
        raise PackageError("libvulkan.so.1: not found (apt-get install libvulkan1)")
    shutil.copyfile(loader.resolve(), out / "lib" / "libvulkan.so.1")
    (out / "cases").mkdir()
    for case in P11_CASES:
        shutil.copy2(CASES_DIR / case, out / "cases" / case)
    shutil.copy2(Path(__file__).with_name("device_run.sh"), out / "run.sh")
    (out / "run.sh").chmod(0o755)
    files = {str(p.relative_to(out)): p.stat().st_size for p in sorted(out.rglob("*")) if p.is_file()}
    manifest = {
        "format": "aliasfuzz-device-package/1",
        "features": [feature for _, feature in PROBES] if probes_from is None else [],
        "probes": str(built),
        "compute_cap": os.environ.get("CUDA_COMPUTE_CAP", COMPUTE_CAP),
        "toolkit": list(TOOLKIT_WHEELS),
        "files": files,
        "unpacked": unpacked,
        "bytes": sum(files.values()),
    }
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    total = manifest["bytes"] + (out / "MANIFEST.json").stat().st_size
    if total > SIZE_LIMIT:
        raise PackageError(f"{out}: {total / 2**20:.1f} MiB, over the {SIZE_LIMIT // 2**20} MiB limit")
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.device_package", description=__doc__)
    parser.add_argument("--out", type=Path, default=DIST, help="the package's folder (default dist/device)")
    parser.add_argument("--no-build", action="store_true", help="package the last device build as it is")
    parser.add_argument("--probes-from", type=Path, help="package these probe binaries instead (no CUDA build)")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    try:
        if not args.no_build and args.probes_from is None:
            status = build_probes(prepare_toolkit(), args.quiet)
            if status != 0:
                print(f"aliasfuzz device-package: the CUDA build failed (status {status})", file=sys.stderr)
                return 2
        manifest = package(args.out, args.probes_from)
    except PackageError as err:
        print(f"aliasfuzz device-package: {err}", file=sys.stderr)
        return 2
    print(
        f"aliasfuzz device-package: {args.out}: {manifest['bytes'] / 2**20:.1f} MiB in {len(manifest['files'])} files"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
