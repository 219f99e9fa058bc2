"""Where things live: the repository, the probe binaries, the bundled cases."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROBES_WORKSPACE = ROOT / "rust_probes"
CASES_DIR = ROOT / "tests" / "cases"
BASELINE = ROOT / "harness" / "baseline.toml"
SCHEMA = PROBES_WORKSPACE / "protocol" / "schema" / "protocol.schema.json"


def cargo_target_dir() -> Path:
    """The one cargo target directory every probe build shares (``CARGO_TARGET_DIR`` wins)."""
    env = os.environ.get("CARGO_TARGET_DIR")
    return Path(env) if env else PROBES_WORKSPACE / "target"


def probe_binary(name: str) -> Path:
    """A probe binary: ``ALIASFUZZ_PROBE_DIR`` first (prebuilt probes), else the cargo build."""
    env = os.environ.get("ALIASFUZZ_PROBE_DIR")
    base = Path(env) if env else cargo_target_dir() / "debug"
    return base / name
