"""candle: the compiled probe ``rust_probes/candle_probe`` (candle-core / candle-nn)."""

from __future__ import annotations

from harness.paths import BUILD_PROBES_HINT, ROOT, probe_binary
from harness.targets.candle.reproducer import SCAFFOLD

FRAMEWORK = "candle"
#: The crate whose version is the framework's (a key of the handshake's versions; the release
#: a bisection pins).
RELEASE_PACKAGE = "candle-core"
BUILD_HINT = BUILD_PROBES_HINT
#: Its reproducer: the probe's transcript of a case in a cargo project (its crates, its CPU target).
REPRODUCER_SCAFFOLD = SCAFFOLD


def command() -> list[str]:
    return [str(probe_binary("candle_probe"))]


CWD = str(ROOT)
