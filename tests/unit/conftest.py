"""The unit tier's rule, kept by a guard: a unit test runs the harness's own logic in this process.
It starts no process (no probe, not even the fake one, no ``aliasfuzz`` command, no ``make``),
opens no network connection (no Redis), and runs no framework (the torch session, which the
reproducer writer would start in-process, refuses). A test that needs any of them belongs in
``tests/probes/`` or ``tests/e2e/``, and the guard's error says so."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest

# Imported here, before any test runs: torch's own import starts ``ldconfig``, which the guard
# would refuse, and the torch session is what the guard patches.
from harness.targets.torch.session import TorchProbe


def _refuse(what: str):
    def refuse(*args, **kwargs):
        raise RuntimeError(
            f"the unit tier {what}: move this test to tests/probes/ or tests/e2e/ (tests/unit/conftest.py)"
        )

    return refuse


@pytest.fixture(autouse=True)
def unit_tier_guard(monkeypatch):
    monkeypatch.setattr(subprocess.Popen, "__init__", _refuse("starts no process"))
    monkeypatch.setattr(os, "system", _refuse("starts no process"))
    monkeypatch.setattr(os, "posix_spawn", _refuse("starts no process"))
    monkeypatch.setattr(os, "fork", _refuse("starts no process"))
    monkeypatch.setattr(socket.socket, "connect", _refuse("opens no connection"))
    monkeypatch.setattr(socket, "create_connection", _refuse("opens no connection"))
    monkeypatch.setattr(TorchProbe, "__init__", _refuse("runs no framework"))
