"""Builds the Rust probes: one ``cargo build`` of the workspace, streamed to the terminal.

Features follow the platform: ``metal`` on macOS, ``cuda`` when asked (``--cuda=1``), burn's
``wgpu`` backend when asked (``--full=1``). Every build shares one cargo target directory
(``paths.cargo_target_dir``). The elapsed time of each build is appended to
``<target>/aliasfuzz-builds.jsonl`` so build costs can be measured rather than guessed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time

from subprocess_tee import run

from harness.paths import PROBES_WORKSPACE, cargo_target_dir


def features(full: bool, cuda: bool) -> list[str]:
    out = []
    if platform.system() == "Darwin":
        out += ["candle_probe/metal", "burn_probe/metal"]
    if cuda:
        out += ["candle_probe/cuda", "burn_probe/cuda"]
    if full:
        out += ["burn_probe/wgpu"]
    return out


def record_build(seconds: float, feats: list[str], status: int, profile: str = "dev") -> None:
    """Appends one build's duration, features, cargo profile and exit status to
    ``<target>/aliasfuzz-builds.jsonl``."""
    target = cargo_target_dir()
    target.mkdir(parents=True, exist_ok=True)
    entry = {"time": time.time(), "seconds": round(seconds, 1), "features": feats, "status": status}
    if profile != "dev":
        entry["profile"] = profile
    with open(target / "aliasfuzz-builds.jsonl", "a", encoding="utf-8") as log:
        log.write(json.dumps(entry) + "\n")


def build(full: bool = False, cuda: bool = False, quiet: bool = False) -> int:
    if shutil.which("cargo") is None:
        print("aliasfuzz build: cargo not found: install Rust (https://rustup.rs)", file=sys.stderr)
        return 2
    feats = features(full, cuda)
    cmd = ["cargo", "build", "--workspace", "--bins"]
    if feats:
        cmd += ["--features", ",".join(feats)]
    env = {**os.environ, "CARGO_TARGET_DIR": str(cargo_target_dir())}
    if cuda:
        env.setdefault("CUDA_COMPUTE_CAP", "90")
    print(f"aliasfuzz build: {' '.join(cmd)}", flush=True)
    start = time.monotonic()
    result = run(cmd, cwd=PROBES_WORKSPACE, env=env, quiet=quiet, check=False)
    elapsed = time.monotonic() - start
    record_build(elapsed, feats, result.returncode)
    print(f"aliasfuzz build: {'ok' if result.returncode == 0 else 'FAILED'} in {elapsed:.1f}s", flush=True)
    return result.returncode


def built_features() -> list[str]:
    """The features of the last probe build that succeeded in this target directory (``[]``
    when none is on record). A later cargo build that shares the target directory asks for the
    same ones, so that cargo resolves every dependency as the probes did and rebuilds none."""
    log = cargo_target_dir() / "aliasfuzz-builds.jsonl"
    if not log.exists():
        return []
    for line in reversed(log.read_text(encoding="utf-8").splitlines()):
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if entry.get("status") == 0 and entry.get("profile", "dev") == "dev":
            return list(entry.get("features", []))
    return []


def cargo_test(full: bool = False, cuda: bool = False, quiet: bool = False) -> int:
    """``cargo test --workspace`` in the same target directory as the probe build (the probes'
    own unit tests: protocol encoding, pinned versions), with the same features: another
    feature set would compile the dependency trees once more."""
    cmd = ["cargo", "test", "--workspace", "-q"]
    feats = features(full, cuda)
    if feats:
        cmd += ["--features", ",".join(feats)]
    env = {**os.environ, "CARGO_TARGET_DIR": str(cargo_target_dir())}
    print(f"aliasfuzz build: {' '.join(cmd)}", flush=True)
    return run(cmd, cwd=PROBES_WORKSPACE, env=env, quiet=quiet, check=False).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.build", description=__doc__)
    parser.add_argument("--full", default="0", help="1: also build burn's wgpu backend")
    parser.add_argument("--cuda", default="0", help="1: build candle's and burn's CUDA backends")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--cargo-test", action="store_true", help="run the probes' cargo tests instead")
    args = parser.parse_args(argv)
    if args.cargo_test:
        return cargo_test(args.full == "1", args.cuda == "1", args.quiet)
    return build(args.full == "1", args.cuda == "1", args.quiet)


if __name__ == "__main__":
    sys.exit(main())
