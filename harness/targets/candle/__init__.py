"""candle: the compiled probe ``rust_probes/candle_probe`` (candle-core / candle-nn)."""

from __future__ import annotations

from harness.paths import ROOT, probe_binary

FRAMEWORK = "candle"
BUILD_HINT = "build it with `make probes`"


def command() -> list[str]:
    return [str(probe_binary("candle_probe"))]


CWD = str(ROOT)
