"""TEST DOUBLE helpers: ``Target`` objects backed by the fake probe (see fake_probe.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from harness.targets.base import ProbeProcess, Target, TargetInfo

FAKE = Path(__file__).with_name("fake_probe.py")


def fake_target(
    device: str = "ref", *flags: str, timeout_s: float = 5.0, differs_on: tuple[str, ...] | None = None
) -> Target:
    """``differs_on`` declares the target a variant that only differs on those ops (PROTOCOL.md)."""
    proc = ProbeProcess(f"fake:{device}", [sys.executable, str(FAKE), *flags], timeout_s=timeout_s, start_timeout_s=10)
    hello = proc.start()
    info = TargetInfo(
        f"fake:{device}",
        "fake",
        device,
        None,
        "cpu",
        hello["versions"],
        tuple(hello["ops"]),
        tuple(hello["methods"]),
        differs_on,
    )
    return Target(info, proc)
