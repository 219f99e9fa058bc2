"""Redis is an optional extra (``aliasfuzz[redis]``): nothing but a shared store imports it, and
a shared store asked for without it is one line saying how to install it.

The tests here run in this process, as the
unit tier requires; those that need real processes are in tests/e2e/test_redis_extra.py.
"""

from __future__ import annotations

import tomllib

from tests.conftest import ROOT


def test_redis_is_an_extra_not_a_dependency():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if d.split("[")[0].strip().lower() == "redis"]
    assert project["optional-dependencies"]["redis"] == ["redis"]
