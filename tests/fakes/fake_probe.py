"""TEST DOUBLE: a fake probe for testing the harness's own logic. Never a framework stand-in.

A tiny numpy interpreter of the case format speaking the real probe protocol, with two devices:
``ref`` (clean value semantics: every snapshot is a copy except ``alias``) and ``planted``, which
carries one deliberately planted aliasing bug: its ``clone`` returns the same buffer, so a clone
follows later writes and steps. Only ``sgd`` steps are interpreted; other optimizers, moves and
module ops answer ``unsupported``.

Fault switches for the reliability tests (command-line flags):
``--protocol N`` (answer another protocol version), ``--bad-hello`` (a handshake of the right
protocol whose ``devices`` is a string), ``--exit-at-start``, ``--garbage`` (stray
text before every reply), ``--hang-on-fill`` (a ``fill`` op never returns), ``--die-on-scale``
(a ``scale`` op kills the process with SIGKILL), ``--bad-trace`` (a program with a ``fill`` op
gets a reply that is valid JSON and a ``trace`` for its id, but whose observations are malformed:
a ``null`` value element and a shape that is not a list), ``--slow-ms N`` (sleep per program),
``--fail-always`` (every program gets an ``error`` trace), ``--planted-after N`` (the planted
bug shows only from the process's N+1-th program on: a divergence that depends on what the
process ran before, which a confirmation on fresh processes calls flaky), ``--hang-always`` (answers the handshake, then never answers a ``run``: it sleeps in the first
one, reading nothing more, as a probe stuck in a framework call would; it exits once the process
that started it is gone, so a failed test leaks nothing), ``--hang-at-hello`` (reads the
handshake request and never answers it, exiting as ``--hang-always`` does), ``--planted-inert-read`` (on every
device, a ``read`` of a param makes later ``sgd`` steps leave it alone: an inert op that changes
the run, for the metamorphic oracle's tests), ``--planted-inert-read-until N`` (that planted read
works only in the process's first N programs: a metamorphic divergence that the shrinker sees and
a later run in the same process does not), ``--log-programs DIR`` (every program run on the
``ref`` device is appended, as canonical JSON, to ``DIR/<pid>.jsonl``: which programs a campaign
ran, whatever process ran them).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

import numpy as np

# The protocol version the harness speaks, from its one home (the fake runs as a script).
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from harness.targets.protocol import PROTOCOL_VERSION  # noqa: E402

# Devices with the planted bug. ``ref+planted`` is not in the handshake: a test declares it as a
# variant of ``ref`` to test how the harness treats variants.
PLANTED = ("planted", "ref+planted")
# The snapshot methods whose shape differs from the source's (harness/case/ops.py METHOD_TABLE).
SHAPED = {
    "expand": lambda a: np.broadcast_to(a[None], (2,) + a.shape),
    "permute": lambda a: np.moveaxis(a, 0, -1),
    "flip": lambda a: a[::-1],
    "narrow": lambda a: a[1:],
    "unsqueeze": lambda a: a[None],
    "squeeze": lambda a: a[0],
    "chunk": lambda a: a[: (a.shape[0] + 1) // 2],
    "select": lambda a: a[0],
}


def obs(t, device):
    arr, ident = t
    # PROTOCOL.md's OBS: shape, value, identity, device, requires_grad, initialized, dtype, note
    return [list(arr.shape), [float(x) for x in arr.reshape(-1)], ident, device, None, True, None, None]


def run(program, device, flags):
    names = {}
    trainable = []
    grads = {}
    for t in program["tensors"]:
        shape = tuple(t["shape"])
        if t["kind"] == "lazy":
            value = np.full(shape, t.get("fill") or 0.0, dtype=np.float32)
        else:
            value = np.array(t["value"], dtype=np.float32).reshape(shape)
        names[t["name"]] = (value, t["name"])
        if t["kind"] != "buffer":
            trainable.append(t["name"])
            grads[t["name"]] = np.array(t.get("grad") or [1.0] * value.size, dtype=np.float32).reshape(shape)
    initial = {n: obs(v, device) for n, v in names.items()}
    previous = dict(initial)
    forgotten: set[str] = set()  # --planted-inert-read: params read, which steps then skip
    steps = []
    for op in program["ops"]:
        status, message = "ok", None
        kind = op.get("op")
        uses = [op[k] for k in ("of", "target") if k in op]
        if any(u not in names for u in uses):
            status, message = "skipped", "missing name"
        elif kind == "snapshot":
            arr, ident = names[op["of"]]
            m = op["method"]
            planted = device in PLANTED and flags.served > flags.planted_after
            if m == "alias" or (m == "clone" and planted):
                names[op["name"]] = (arr, ident)
            elif m == "reshape":
                names[op["name"]] = (arr.reshape(-1).copy(), op["name"])
            elif m == "view_row":
                names[op["name"]] = (arr[0:1].copy(), op["name"])
            elif m == "transpose":
                names[op["name"]] = (arr.swapaxes(-1, -2).copy(), op["name"])
            elif m in SHAPED:  # copies in the op table's shape, so later ops see the shapes it declares
                names[op["name"]] = (np.array(SHAPED[m](arr)), op["name"])
            else:
                names[op["name"]] = (arr.copy(), op["name"])
        elif kind == "write":
            arr = names[op["target"]][0]
            if op["index"] is None:
                arr[...] = np.array(op["value"], dtype=np.float32).reshape(arr.shape)
            else:
                arr[op["index"]] = np.array(op["value"], dtype=np.float32).reshape(arr.shape[1:])
        elif kind == "fill":
            if flags.hang_on_fill:
                time.sleep(3600)
            names[op["target"]][0][...] = op["value"]
        elif kind == "scale":
            if flags.die_on_scale:
                os.kill(os.getpid(), signal.SIGKILL)
            names[op["target"]][0][...] *= np.float32(op["factor"])
        elif kind == "step" and op["optimizer"] == "sgd":
            for p in trainable:
                if p in forgotten:
                    continue
                arr = names[p][0]
                arr -= np.float32(op["lr"]) * grads[p]
        elif kind == "read":
            if flags.planted_inert_read and (
                flags.planted_inert_read_until is None or flags.served <= flags.planted_inert_read_until
            ):
                forgotten.add(op["target"])
        else:
            status, message = "unsupported", f"fake probe has no {kind}"
        now = {n: obs(v, device) for n, v in names.items()}
        steps.append(
            {
                "status": status,
                **({"message": message} if message else {}),
                "changed": {n: o for n, o in now.items() if previous.get(n) != o},
            }
        )
        previous = now
    return {"initial": initial, "steps": steps}


def hang_until_orphaned() -> None:
    """Never returns while the harness that started this process lives; exits once it is gone,
    so a test whose harness was killed leaves no fake behind."""
    parent = os.getppid()
    while os.getppid() == parent:
        time.sleep(0.5)
    sys.exit(0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--protocol", type=int, default=PROTOCOL_VERSION)
    ap.add_argument("--exit-at-start", action="store_true")
    ap.add_argument("--garbage", action="store_true")
    ap.add_argument("--hang-on-fill", action="store_true")
    ap.add_argument("--die-on-scale", action="store_true")
    ap.add_argument("--bad-trace", action="store_true")
    ap.add_argument("--bad-hello", action="store_true")
    ap.add_argument("--planted-program-timeout-s", type=float, default=None)
    ap.add_argument("--slow-ms", type=float, default=0)
    ap.add_argument("--hang-always", action="store_true")
    ap.add_argument("--hang-at-hello", action="store_true")
    ap.add_argument("--fail-always", action="store_true")
    ap.add_argument("--planted-after", type=int, default=0)
    ap.add_argument("--planted-inert-read", action="store_true")
    ap.add_argument("--planted-inert-read-until", type=int, default=None)
    ap.add_argument("--log-programs", default=None)
    # PACKAGE=VERSION in the handshake's versions (as a framework reports its release)
    ap.add_argument("--version", action="append", default=[])
    flags = ap.parse_args()
    flags.served = 0  # run requests served by this process
    if flags.exit_at_start:
        sys.exit(3)
    out = sys.stdout
    for line in sys.stdin:
        try:
            req = json.loads(line)
        except ValueError:
            out.write(json.dumps({"type": "error", "id": None, "message": "malformed"}) + "\n")
            out.flush()
            continue
        if flags.garbage:
            out.write("stray debug output {not json\n")
        if req.get("type") == "hello":
            if flags.hang_at_hello:
                hang_until_orphaned()
            reply = {
                "type": "hello",
                "protocol": flags.protocol,
                "framework": "fake",
                "versions": {"fake": "0", **dict(v.split("=", 1) for v in flags.version)},
                "devices": [
                    {"name": "ref", "alt": None, "kind": "cpu"},
                    {"name": "planted", "alt": None, "kind": "cpu"},
                ],
                "ops": ["snapshot", "write", "fill", "scale", "step", "read"],
                "methods": ["alias", "clone", "detach", "reshape", "view_row", "transpose"],
            }
            if flags.planted_program_timeout_s is not None:
                reply["devices"][1]["program_timeout_s"] = flags.planted_program_timeout_s
            if flags.bad_hello:
                reply["devices"] = "ref"
        elif req.get("type") == "run":
            if flags.hang_always:
                hang_until_orphaned()
            flags.served += 1
            if flags.log_programs and req["device"] == "ref":
                with open(os.path.join(flags.log_programs, f"{os.getpid()}.jsonl"), "a", encoding="utf-8") as log:
                    log.write(json.dumps(req["program"], sort_keys=True) + "\n")
            if flags.slow_ms:
                time.sleep(flags.slow_ms / 1000)
            reply = {
                "type": "trace",
                "id": req["id"],
                "device": req["device"],
                "status": "ok",
                **run(req["program"], req["device"], flags),
                "elapsed_us": 1,
            }
            if flags.fail_always:
                reply = {
                    "type": "trace",
                    "id": req["id"],
                    "device": req["device"],
                    "status": "error",
                    "message": "fails every program (--fail-always)",
                    "initial": {},
                    "steps": [],
                }
            if flags.bad_trace and any(op.get("op") == "fill" for op in req["program"]["ops"]):
                reply["initial"] = {n: [7, [None], *o[2:]] for n, o in reply["initial"].items()}
        elif req.get("type") == "exit":
            break
        else:
            reply = {"type": "error", "id": None, "message": "unknown request"}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
