"""burn: the compiled probe ``rust_probes/burn_probe`` (flex and ndarray; wgpu when built)."""

from __future__ import annotations

from harness.paths import BUILD_PROBES_HINT, ROOT, probe_binary
from harness.targets.burn.reproducer import SCAFFOLD

FRAMEWORK = "burn"
#: The crate whose version is the framework's (a key of the handshake's versions; the release
#: a bisection pins).
RELEASE_PACKAGE = "burn"
BUILD_HINT = BUILD_PROBES_HINT
#: Its reproducer: the probe's transcript of a case in a cargo project (its crates, its CPU target).
REPRODUCER_SCAFFOLD = SCAFFOLD


def command() -> list[str]:
    return [str(probe_binary("burn_probe"))]


CWD = str(ROOT)
