"""The op table (``harness/case/ops.py``) is the one definition of every op and snapshot method:
its invariants hold, and the protocol schema file, the generators and every probe's handshake
agree with it. (The Rust protocol crate's own test checks its enums against the schema file, so
schema == table here and enums == schema there close the loop.)

The tests of this subject that run in-process are in tests/unit/case/test_op_table.py.
"""

from __future__ import annotations

import json
import subprocess

import jsonschema
import pytest

from harness.case import ops
from harness.targets import registry, schema
from harness.targets.protocol import PROTOCOL_VERSION


def _hello(plugin) -> dict:
    proc = subprocess.run(
        plugin.command(),
        input=json.dumps({"type": "hello", "protocol": PROTOCOL_VERSION}) + "\n",
        capture_output=True,
        text=True,
        cwd=plugin.CWD,
        timeout=120,
    )
    assert proc.stdout, f"{plugin.FRAMEWORK}: no hello ({proc.stderr[-500:]})"
    return json.loads(proc.stdout.splitlines()[0])


@pytest.mark.parametrize("plugin", registry.PLUGINS, ids=lambda p: p.FRAMEWORK)
def test_every_probe_handshake_agrees_with_the_table(plugin):
    hello = _hello(plugin)
    jsonschema.Draft202012Validator(schema.protocol_schema()).validate(hello)
    # Each probe lists the ops it interprets, in the table's order; burn and torch interpret all.
    assert hello["ops"] == [k for k in ops.OP_KINDS if k in hello["ops"]]
    assert hello["methods"] == [m for m in ops.METHODS if m in hello["methods"]]
    if plugin.FRAMEWORK in ("torch", "burn"):
        assert hello["ops"] == list(ops.OP_KINDS)
