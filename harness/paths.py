"""Where things live: the repository, the probe binaries, the bundled cases."""

from __future__ import annotations

import os
from collections.abc import Mapping
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


#: The folder of prebuilt probe binaries (a device package's), read before the cargo build's.
PROBE_DIR_VARIABLE = "ALIASFUZZ_PROBE_DIR"
#: The fix for a compiled probe that is missing, stale or broken, where the cargo build made it.
BUILD_PROBES_HINT = "build it with `make probes`"


def probe_binary(name: str) -> Path:
    """A probe binary: ``ALIASFUZZ_PROBE_DIR`` first (prebuilt probes), else the cargo build."""
    env = os.environ.get(PROBE_DIR_VARIABLE)
    base = Path(env) if env else cargo_target_dir() / "debug"
    return base / name


def probe_hint(hint: str = BUILD_PROBES_HINT, env: Mapping[str, str] | None = None) -> str:
    """The fix to name for a probe that did not start: ``hint`` (a plugin's ``BUILD_HINT``), except
    that a compiled probe taken from ``ALIASFUZZ_PROBE_DIR`` (``env``, else the process's) was
    never built here, and the machine running it may have no Rust at all (a device package): the
    fix is then a working binary in that folder, not ``make probes``."""
    prebuilt = (os.environ if env is None else env).get(PROBE_DIR_VARIABLE)
    if hint != BUILD_PROBES_HINT or not prebuilt:
        return hint
    return f"the probes come prebuilt from {PROBE_DIR_VARIABLE}={prebuilt}: put working ones there"
