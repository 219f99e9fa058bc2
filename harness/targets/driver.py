"""The probe driver for targets written in Python: the twin of ``aliasfuzz_protocol::{serve,
run_program}`` (``rust_probes/protocol/src/lib.rs``), with the same structure and names.

A Python target is a process that runs ``serve(probe)``: it reads JSON requests on stdin and
writes one JSON reply per request on stdout, one per line, flushed after each
(``rust_probes/protocol/PROTOCOL.md``). The driver owns everything that is not framework specific,
exactly as the Rust driver does:

- a line that is not a valid request gets ``{"type": "error", "id": null, "message": ...}`` and the
  driver reads the next line; blank lines are ignored; ``{"type": "exit"}`` or end of input returns 0;
- ``hello`` is answered with the probe's hello, always with this side's ``PROTOCOL_VERSION`` so that
  the harness can name both numbers;
- an op whose ``op`` field is missing or not a string: status ``error``; an op name outside the
  op table (``harness.case.ops``): ``unsupported`` (``unknown op "name"``); an op with a missing,
  unknown or mistyped field: ``error`` (``malformed op: ...``); an op using names that are not
  bound: ``skipped`` (``no tensor named a, b``), as is one whose session raises ``Skipped`` (a
  checkpoint whose ``save`` did not run there);
- an exception raised inside ``apply`` (the Python form of a Rust panic): ``error`` with
  ``"<ExceptionType>: <message>"``; one raised by ``observe``: that name's observation is
  ``unreadable`` with the same message;
- ``changed`` holds the names whose observation differs from the previous step (new names
  included), compared like the Rust ``Obs: PartialEq`` (``protocol.same_obs``);
- non-finite floats travel as the strings ``"NaN"``, ``"Infinity"``, ``"-Infinity"``.

Differences from the Rust driver, on purpose: a request line that is not UTF-8 gets an ``error``
reply (the Rust ``lines()`` loop stops reading there); a bug of the driver itself answers
``{"type": "error", "id": null, "message": "internal error: ..."}`` instead of ending the process;
observations are listed in binding order (the Rust ``BTreeMap`` sorts them; order carries no
meaning).

What a framework implements, and nothing else (``Probe`` and ``Session`` below):

- a probe: ``hello()``, the handshake's fields (framework, versions, devices, ops, methods; the
  driver adds ``type`` and sets ``protocol``), and ``open(device, program)``, which creates the
  program's tensors on ``device`` and returns a session, or raises (``Unsupported``, a trace of
  status ``unsupported``, or ``OpError`` for a message reported as is; any other exception as
  ``"<Type>: <message>"``, both of status ``error``);
- a session, one program on one device, that may keep a transcript of the calls it makes
  (``begin_op()``, called before each op, and ``transcript()``, the reply's ``transcript`` when
  the request asks for it), and that may run ops into a compiled graph whose effects show only
  after a later op (``end_op()``, called after each op: True leaves the op unobserved, its step
  ``fused``; an exception from it fails the op): ``apply(op)`` runs one parsed op (every field present,
  every name it uses bound) and raises ``Unsupported`` where the framework has no such call;
  ``names()`` lists the names bound now, in binding order; ``observe(name)`` reads one name to
  the host as a wire observation (``protocol.observation``) and must not force a lazy parameter's initialisation. The session's tensors change only
  inside ``open`` and ``apply``: between two ``apply`` calls the driver may observe any number of
  times and must see the same thing.

Fault injection (a TEST DOUBLE hook for the harness's reliability tests, not a framework stand-in):
with ``fault`` set (``fault_from_env``) and a program containing the op ``{"op": "_fault"}``, the
process kills itself with ``SIGSEGV`` (``segfault``) or sleeps forever (``hang``) when it reaches
that op. Without it ``_fault`` is an unknown op and answers ``unsupported`` like any other.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any, BinaryIO, Protocol, TextIO

from harness.targets.protocol import (
    PROTOCOL_VERSION,
    Exit,
    Hello,
    Malformed,
    Run,
    WireProgram,
    encode_floats,
    is_op_kind,
    parse_op,
    parse_request,
    same_obs,
    unreadable,
    uses,
)

#: The op that triggers a fault, and the faults it can trigger.
FAULT_OP = "_fault"
FAULTS = ("segfault", "hang")

#: Step statuses (``OpStatus``).
OK, UNSUPPORTED, ERROR, SKIPPED = "ok", "unsupported", "error", "skipped"


class Unsupported(Exception):
    """``Outcome::Unsupported``: the framework has no call for this op (or device, in ``open``);
    the message is reported as is."""


class Skipped(Exception):
    """``Outcome::Skipped``: something the op needs was never made in this session (a checkpoint
    whose ``save`` did not run); the message is reported as is."""


class OpError(Exception):
    """``Outcome::Error``: the op failed for a reason the session words itself; the message is
    reported as is (any other exception is reported as ``"<Type>: <message>"``)."""


class Session(Protocol):
    """One program being interpreted on one device (see the module docstring)."""

    def apply(self, op: dict) -> None: ...

    def names(self) -> list[str]: ...

    def observe(self, name: str) -> dict: ...


class Probe(Protocol):
    def hello(self) -> dict[str, Any]: ...

    def open(self, device: str, program: WireProgram) -> Session: ...


def _message(e: BaseException) -> str:
    """What a trace says of an exception: a driver exception's own words, else its type too."""
    if isinstance(e, (Unsupported, OpError)):
        return str(e)
    return f"{type(e).__name__}: {e}"


def fault_from_env(variable: str) -> str | None:
    """The fault the environment variable ``variable`` asks for, or None (unset or unknown)."""
    value = os.environ.get(variable) or None
    return value if value in FAULTS else None


def _inject(fault: str) -> None:
    if fault == "segfault":
        os.kill(os.getpid(), signal.SIGSEGV)
    while True:  # "hang", or a SIGSEGV not delivered yet
        time.sleep(3600)


def observe_all(session: Session) -> dict[str, dict]:
    out = {}
    for name in session.names():
        try:
            out[name] = session.observe(name)
        except Exception as e:  # noqa: BLE001 - an unreadable tensor is data, not a crash
            out[name] = unreadable(_message(e))
    return out


def run_op(session: Session, raw: Any, fault: str | None = None) -> tuple[str, str | None]:
    """One raw op on the session: its status and message (None when ``ok``)."""
    name = raw.get("op") if isinstance(raw, dict) else None
    if not isinstance(name, str):
        return ERROR, "malformed op: no string field `op`"
    if name == FAULT_OP and fault is not None:
        _inject(fault)
    if not is_op_kind(name):
        return UNSUPPORTED, f"unknown op {json.dumps(name)}"
    try:
        op = parse_op(raw)
    except Malformed as e:
        return ERROR, f"malformed op: {e}"
    needed = uses(op)
    if needed:
        bound = session.names()
        missing = [n for n in needed if n not in bound]
        if missing:
            return SKIPPED, f"no tensor named {', '.join(missing)}"
    try:
        session.apply(op)
    except Unsupported as e:
        return UNSUPPORTED, str(e)
    except Skipped as e:
        return SKIPPED, str(e)
    except Exception as e:  # noqa: BLE001 - the framework's errors are the data
        return ERROR, _message(e)
    return OK, None


def _elapsed_us(start: float) -> int:
    return int((time.perf_counter() - start) * 1e6)


def run_program(
    probe: Probe, id: int, device: str, program: WireProgram, fault: str | None = None, transcript: bool = False
) -> dict:
    """Interprets one program: the part of the protocol that is the same for every framework.
    Returns the trace reply, floats not yet encoded; with ``transcript``, and a session that
    keeps one, the calls it made (PROTOCOL.md)."""
    start = time.perf_counter()
    trace: dict[str, Any] = {"type": "trace", "id": id, "device": device}
    try:
        session = probe.open(device, program)
    except Exception as e:  # noqa: BLE001 - a device or tensor that cannot be made
        # ``Unsupported``: the framework cannot run this program on the device at all (Rust
        # ``Refusal::Unsupported``); anything else: its tensors could not be made.
        trace.update(
            status=UNSUPPORTED if isinstance(e, Unsupported) else ERROR,
            message=_message(e),
            initial={},
            steps=[],
            elapsed_us=_elapsed_us(start),
        )
        return trace
    initial = observe_all(session)
    previous = initial
    steps = []
    begin_op, end_op = getattr(session, "begin_op", None), getattr(session, "end_op", None)
    for raw in program.ops:
        if begin_op is not None:
            begin_op()
        status, message = run_op(session, raw, fault)
        fused = False
        if end_op is not None:
            try:
                fused = bool(end_op())
            except Exception as e:  # noqa: BLE001 - the op's compiled run failed: the op fails
                if status == OK:
                    status, message = ERROR, _message(e)
        step: dict[str, Any] = {"status": status}
        if fused:
            step.update(changed={}, fused=True)  # its effects show after a later op (PROTOCOL.md)
        else:
            now = observe_all(session)
            step["changed"] = {k: v for k, v in now.items() if not same_obs(previous.get(k), v)}
            previous = now
        if message is not None:
            step["message"] = message
        steps.append(step)
    trace.update(status=OK, initial=initial, steps=steps, elapsed_us=_elapsed_us(start))
    if transcript and hasattr(session, "transcript"):
        trace["transcript"] = session.transcript()
    return trace


def handle(probe: Probe, line: bytes, fault: str | None = None) -> dict | None:
    """One request line -> its reply, or None for ``exit``."""
    try:
        request = parse_request(line)
    except Malformed as e:
        return {"type": "error", "id": None, "message": f"malformed request: {e}"}
    if isinstance(request, Exit):
        return None
    if isinstance(request, Hello):
        # Always our own protocol number, so the harness can name both.
        return {
            "type": "hello",
            "protocol": PROTOCOL_VERSION,
            **{k: v for k, v in probe.hello().items() if k not in ("type", "protocol")},
        }
    assert isinstance(request, Run)
    reply = run_program(probe, request.id, request.device, request.program, fault, request.transcript)
    encode_floats(reply)
    return reply


def serve(probe: Probe, fault: str | None = None, stdin: BinaryIO | None = None, stdout: TextIO | None = None) -> int:
    """Serves the protocol on stdin/stdout until ``exit`` or end of input; returns the exit
    status, 0. Never raises on bad input: a bad line gets an ``error`` reply."""
    stdin = stdin or sys.stdin.buffer
    stdout = stdout or sys.stdout
    while True:
        line = stdin.readline()
        if not line:
            break
        if not line.strip():
            continue
        try:
            reply = handle(probe, line, fault)
            if reply is None:
                break
            text = json.dumps(reply, separators=(",", ":"), allow_nan=False)
        except Exception as e:  # noqa: BLE001 - a driver bug must not kill the target
            text = json.dumps({"type": "error", "id": None, "message": f"internal error: {type(e).__name__}: {e}"})
        try:
            stdout.write(text + "\n")
            stdout.flush()
        except BrokenPipeError:
            break  # the harness went away
    return 0
