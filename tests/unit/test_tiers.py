"""The test tiers (tests/conftest.py ``TIERS``): every test module lives in one, and the unit
tier's guard (tests/unit/conftest.py) refuses what a unit test must not do."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from harness.targets.torch.session import TorchProbe
from tests.conftest import ROOT, TIERS


def test_every_test_module_lives_in_a_tier():
    tests = ROOT / "tests"
    outside = [
        p.relative_to(tests).as_posix() for p in tests.rglob("test_*.py") if p.relative_to(tests).parts[0] not in TIERS
    ]
    assert outside == []


def test_every_tier_has_its_folder_and_marker(pytestconfig):
    markers = {line.split(":")[0] for line in pytestconfig.getini("markers")}
    for tier in TIERS:
        assert (ROOT / "tests" / tier / "__init__.py").is_file(), tier
        assert tier in markers, tier


def test_this_module_is_marked_unit(request):
    assert request.node.get_closest_marker("unit") is not None
    assert request.node.get_closest_marker("probes") is None


@pytest.mark.parametrize(
    "attempt",
    [
        lambda: subprocess.run([sys.executable, "-c", "pass"]),
        lambda: socket.create_connection(("127.0.0.1", 9)),
        lambda: socket.socket().connect(("127.0.0.1", 9)),
        lambda: TorchProbe(),
    ],
    ids=["process", "create_connection", "connect", "torch-session"],
)
def test_the_guard_refuses_what_a_unit_test_must_not_do(attempt):
    with pytest.raises(RuntimeError, match="the unit tier .*move this test to tests/probes/ or tests/e2e/"):
        attempt()
