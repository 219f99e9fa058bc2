"""PyTorch: a persistent Python process (``python -m harness.targets.torch``: the Python driver,
``harness.targets.driver``, serving the torch session, ``session.py``) speaking the probe
protocol, so a crash inside torch never takes the harness down and torch is imported once per
campaign."""

from __future__ import annotations

import sys

from harness.paths import ROOT

FRAMEWORK = "torch"
#: The package whose version is the framework's (a key of the handshake's versions).
RELEASE_PACKAGE = "torch"
BUILD_HINT = "install the Python dependencies with `make venv`"
#: None: its reproducer is a Python script, the session's transcript (``reproducer.py``).
REPRODUCER_SCAFFOLD = None
#: ``torch.compile``'s arguments in the ``compile`` variant (``transcript.CompiledLine``):
#: ``aot_eager`` runs Dynamo, functionalization and AOTAutograd without a C++ toolchain; static
#: shapes, so that a recompile is a new graph, never a symbolic one that hides what a shape does.
COMPILE_KWARGS = {"backend": "aot_eager", "dynamic": False}


def command() -> list[str]:
    return [sys.executable, "-m", "harness.targets.torch"]


CWD = str(ROOT)
