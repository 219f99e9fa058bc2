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
#: ``torch.compile``'s arguments in each compiling variant (``transcript.CompiledLine``), static
#: shapes in both, so that a recompile is a new graph, never a symbolic one that hides what a
#: shape does:
#:
#: - ``compile``: ``aot_eager`` runs Dynamo, functionalization and AOTAutograd without a C++
#:   toolchain;
#: - ``inductor``: the same, then Inductor's code generation (C++ kernels on the CPU, Triton on
#:   CUDA), which reuses buffers and writes in place. It needs a C++ compiler, and its first
#:   compile in a process costs tens of seconds (docs/PERFORMANCE.md);
#: - ``graph``: ``aot_eager`` as ``compile``, over a run of ops at once (``GRAPH_VARIANTS``).
COMPILE_VARIANTS = {
    "compile": {"backend": "aot_eager", "dynamic": False},
    "inductor": {"backend": "inductor", "dynamic": False},
    "graph": {"backend": "aot_eager", "dynamic": False},
}
#: The compiling variants that compile each run of ops the op table fuses (``OpSpec.fuses``) as
#: one function, observed after its last op (``graph.py``), where the others compile each
#: statement of an op on its own and observe every op: aliasing across ops (a snapshot and the
#: write through it, in one graph) is what functionalization and AOTAutograd rewrite there.
GRAPH_VARIANTS = ("graph",)


def command() -> list[str]:
    return [sys.executable, "-m", "harness.targets.torch"]


CWD = str(ROOT)
