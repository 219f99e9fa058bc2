"""A minimal probe-protocol client for the probe tests, independent of the harness's own client
(harness/targets/base.py), so each probe is tested on its own. Every message is validated
against rust_probes/protocol/schema/protocol.schema.json."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading

import jsonschema
import pytest

from harness.paths import SCHEMA as SCHEMA_PATH
from harness.paths import probe_binary
from harness.targets.protocol import OBS_FIELDS, PROTOCOL_VERSION
from tests.conftest import ROOT

SCHEMA = json.loads(SCHEMA_PATH.read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


def accelerators(binary_name: str) -> list[str]:
    """The accelerator devices this build of a probe opens here (``FULL=1`` builds burn's wgpu,
    which answers on a Vulkan driver such as lavapipe), from its hello. Asked at collection, so
    that device-parametrized tests run on each; none on a CPU build, so nothing is skipped
    there, and none when the probe is missing (its tests fail with the build hint)."""
    binary = probe_binary(binary_name)
    if not binary.exists():
        return []
    out = subprocess.run(
        [str(binary)],
        input=json.dumps({"type": "hello", "protocol": PROTOCOL_VERSION}) + "\n",
        capture_output=True,
        text=True,
        timeout=180,
    ).stdout
    hello = json.loads(out.splitlines()[0])
    return [d["name"] for d in hello["devices"] if d["kind"] == "gpu"]


#: burn's targets a device-parametrized test runs on: its CPU backends and each accelerator.
BURN_TARGETS = ["burn:flex", "burn:ndarray"] + [f"burn:{d}" for d in accelerators("burn_probe")]


class Probe:
    def __init__(
        self, binary_name: str, default_device: str, timeout_s: float = 60.0, env: dict[str, str] | None = None
    ) -> None:
        self.binary = probe_binary(binary_name)
        if not self.binary.exists():
            pytest.fail(f"{self.binary} is missing: build the probes with `make probes`", pytrace=False)
        self.default_device = default_device
        self.timeout_s = timeout_s
        self.proc = subprocess.Popen(
            [str(self.binary)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
            cwd=ROOT,
            env={**os.environ, **(env or {})},
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()
        self.next_id = 1

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def send_raw(self, line: str) -> dict:
        """Sends one line (valid or not) and returns the one reply, schema-checked."""
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        try:
            out = self.lines.get(timeout=self.timeout_s)
        except queue.Empty:
            pytest.fail(f"no reply within {self.timeout_s}s to {line[:200]}")
        assert out is not None, f"probe exited (rc={self.proc.poll()}) on {line[:200]}"
        reply = json.loads(out)
        VALIDATOR.validate(reply)
        return named_observations(reply)

    def request(self, obj: dict) -> dict:
        VALIDATOR.validate(obj)  # the test's own requests are valid wire form
        return self.send_raw(json.dumps(obj))

    def hello(self) -> dict:
        reply = self.request({"type": "hello", "protocol": PROTOCOL_VERSION})
        assert reply["type"] == "hello"
        return reply

    def run(self, tensors: list[dict], ops: list[dict], device: str | None = None, valid_request: bool = True) -> dict:
        """Runs one program. ``valid_request=False`` sends ops the schema rejects (robustness)."""
        device = device or self.default_device
        rid = self.next_id
        self.next_id += 1
        req = {"type": "run", "id": rid, "device": device, "program": {"tensors": tensors, "ops": ops}}
        reply = self.request(req) if valid_request else self.send_raw(json.dumps(req))
        assert reply["type"] == "trace" and reply["id"] == rid and reply["device"] == device, reply
        if reply["status"] == "ok":
            assert len(reply["steps"]) == len(ops)
        return reply

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"type": "exit"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=10)
            except Exception:
                self.proc.kill()


def named_observations(reply: dict) -> dict:
    """A reply (already schema-checked) with each observation of a trace, a list of
    ``OBS_FIELDS`` on the wire, as a table of those fields, so that tests name what they assert
    (``obs["value"]``); other replies as they came."""
    if reply.get("type") != "trace":
        return reply

    def named(group: dict) -> dict:
        return {name: dict(zip(OBS_FIELDS, obs)) for name, obs in group.items()}

    return {
        **reply,
        "initial": named(reply["initial"]),
        "steps": [{**s, "changed": named(s["changed"])} for s in reply["steps"]],
    }


def states(trace: dict) -> list[dict]:
    """Full state after each op: ``initial`` updated by ``changed`` of steps 0..=i (PROTOCOL.md)."""
    cur = dict(trace["initial"])
    out = []
    for step in trace["steps"]:
        cur = {**cur, **step["changed"]}
        out.append(cur)
    return out
