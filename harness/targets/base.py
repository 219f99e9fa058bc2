"""The one Target interface, and the client for persistent target processes.

Every framework runs in a process of its own that speaks the probe protocol (PROTOCOL.md): the
Rust probes and the PyTorch worker alike. ``ProbeProcess`` owns such a process: it starts it,
checks the handshake, pipelines batches of programs, and survives whatever the process does: a
crash, a hang (per-program timeout), garbage on stdout. A program that kills or hangs the process
gets a ``crash`` or ``timeout`` trace; the process is restarted and the rest of the batch goes on.

Two things bound every wait. A process that gives no trace for ``HUNG_AFTER`` programs in a row
(across restarts), and none for an empty program either, is given up on: its programs get a
``timeout`` trace at once for the rest of the session. A ``Cancellation`` (``cancel()`` from any
thread, or a ``time.monotonic()`` deadline) stops a batch within ``POLL_S``: the process it was
waiting on is killed and the programs left get a ``cancelled`` trace, which is never judged.
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.case.ir import Program
from harness.errors import InputError
from harness.paths import probe_hint
from harness.targets.protocol import PROTOCOL_VERSION
from harness.targets.trace import CRASH, TIMEOUT, MalformedTrace, Trace

#: A trace status set by the harness: the program was cut off by a ``Cancellation`` (Ctrl-C, a
#: budget's end) and has no result. The engine drops such programs; the oracle never judges them.
CANCELLED = "cancelled"

#: Programs in a row without a trace after which a process is checked, and given up on if it
#: does not answer an empty program within ``PING_TIMEOUT_S`` either.
HUNG_AFTER = 2
PING_TIMEOUT_S = 10.0
#: How often a wait looks at its ``Cancellation``.
POLL_S = 0.2
#: The program of that check: one tensor, no op. Any reply for it shows the process is alive.
_PING = {"tensors": [{"name": "p", "kind": "buffer", "shape": [1], "value": [0.0]}], "ops": []}


class SetupError(InputError):
    """A target cannot be used at all (missing or stale binary, broken handshake). One line."""


class Cancellation:
    """Cancels waits on target processes, from any thread: at once (``cancel``, for good) or
    from a ``deadline`` on (``time.monotonic()``; None for none; it may be moved)."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.deadline: float | None = None

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        deadline = self.deadline
        return self._event.is_set() or (deadline is not None and time.monotonic() >= deadline)


@dataclass(frozen=True)
class TargetInfo:
    id: str  # framework:device
    framework: str
    device: str
    alt: str | None
    kind: str
    versions: dict[str, str]
    ops: tuple[str, ...]
    methods: tuple[str, ...]
    # A variant device's ``differs_on`` (PROTOCOL.md): the ops where it runs other code than its
    # plain device. None: it runs other code everywhere (every plain device, every Rust probe).
    differs_on: tuple[str, ...] | None = None
    # An on-request device (PROTOCOL.md): a target only where it is named by its id.
    on_request: bool = False

    @property
    def plain_id(self) -> str:
        """The plain device's target id: this one's, less any ``+variant`` (``torch:cpu`` for
        ``torch:cpu+foreach``)."""
        return f"{self.framework}:{self.device.split('+', 1)[0]}"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "framework": self.framework,
            "device": self.device,
            "alt": self.alt,
            "kind": self.kind,
            "versions": dict(self.versions),
            "ops": list(self.ops),
            "methods": list(self.methods),
            **({"differs_on": list(self.differs_on)} if self.differs_on is not None else {}),
            **({"on_request": True} if self.on_request else {}),
        }


@dataclass
class ProcessStats:
    starts: int = 0
    crashes: int = 0
    timeouts: int = 0
    garbage_lines: int = 0
    malformed_traces: int = 0
    log: list[str] = field(default_factory=list)

    def note(self, line: str) -> None:
        self.log.append(line)
        del self.log[:-200]


class ProbeProcess:
    """A persistent protocol speaker. Thread-compatible, not thread-safe: one batch at a time."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_s: float = 20.0,
        start_timeout_s: float = 120.0,
    ):
        self.name = name
        self.argv = list(argv)
        self.cwd = cwd
        self.env = env
        self.timeout_s = timeout_s
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen | None = None
        self.hello: dict[str, Any] | None = None
        self.stats = ProcessStats()
        self._ids = itertools.count(1)
        self._buf = b""
        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=40)
        self.hung_after = HUNG_AFTER
        #: Why this process was given up on (it hung on every program), or None. Once set, every
        #: program gets a ``timeout`` trace with this message at once, not a wait of its own.
        self.given_up: str | None = None
        self._timeouts_in_a_row = 0

    # -- process life ---------------------------------------------------------------------------

    def start(self, cancel: Cancellation | None = None, timeout_s: float | None = None) -> dict[str, Any]:
        """Starts the process and checks its handshake, waiting for it ``start_timeout_s``, or
        ``timeout_s`` when that is shorter (what is left of a campaign's time). ``SetupError``
        (one line) when it cannot be used; ``_Cancelled`` (the process killed) when ``cancel``
        triggers meanwhile."""
        wait = self.start_timeout_s if timeout_s is None else max(0.0, min(self.start_timeout_s, timeout_s))
        self.stop()
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=self.cwd,
                env=self.env,
                bufsize=0,
                start_new_session=True,
            )
        except OSError as e:
            raise SetupError(
                f"{self.name}: cannot start {self.argv[0]}: {e.strerror or e} ({probe_hint(env=self.env)})"
            ) from None
        self.stats.starts += 1
        self._buf = b""
        self._stderr_tail.clear()
        threading.Thread(target=self._drain_stderr, args=(self.proc,), daemon=True).start()
        try:
            self._send([{"type": "hello", "protocol": PROTOCOL_VERSION}])
            reply = self._read_reply(lambda r: r.get("type") == "hello", wait, cancel)
        except _Cancelled:
            self._kill(self.proc)
            self.proc = None
            raise
        except _ProcessDied as e:
            raise SetupError(f"{self.name}: exited during start-up ({e}){self._tail()}") from None
        except _TimedOut:
            self.stop()
            if wait < self.start_timeout_s:
                raise SetupError(
                    f"{self.name}: no handshake within {wait:.1f}s, when the campaign's time was up "
                    f"(its budget, shrink grace and drain)"
                ) from None
            raise SetupError(f"{self.name}: no handshake within {wait:.0f}s") from None
        if reply.get("protocol") != PROTOCOL_VERSION:
            self.stop()
            raise SetupError(
                f"{self.name}: speaks probe protocol {reply.get('protocol')}, the harness speaks "
                f"{PROTOCOL_VERSION}: the binary is stale, rebuild it ({probe_hint(env=self.env)})"
            )
        problem = _hello_problem(reply)
        if problem is not None:
            self.stop()
            raise SetupError(
                f"{self.name}: malformed handshake ({problem}): the binary is not an "
                f"aliasfuzz probe or is broken, rebuild it ({probe_hint(env=self.env)})"
            )
        self.hello = reply
        return reply

    def ensure_started(self, cancel: Cancellation | None = None) -> dict[str, Any]:
        if self.proc is None or self.proc.poll() is not None:
            return self.start(cancel)
        assert self.hello is not None
        return self.hello

    def stop(self, grace_s: float = 2.0) -> None:
        """Asks the process to exit, and kills its process group after ``grace_s``."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            try:
                proc.stdin.write(b'{"type":"exit"}\n')
                proc.stdin.flush()
            except OSError:
                pass
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self._kill(proc)
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()
            except OSError:
                pass

    def _kill(self, proc: subprocess.Popen | None) -> None:
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            try:
                proc.kill()
            except ProcessLookupError:
                pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    # -- I/O ------------------------------------------------------------------------------------

    def _drain_stderr(self, proc: subprocess.Popen) -> None:
        for line in iter(proc.stderr.readline, b""):
            self._stderr_tail.append(line.decode("utf-8", "replace").rstrip())
        try:
            proc.stderr.close()
        except OSError:
            pass

    def _tail(self) -> str:
        lines = [text for text in self._stderr_tail if text.strip()]
        return f"; stderr: {' | '.join(lines[-3:])}" if lines else ""

    def _send(self, requests: list[dict[str, Any]]) -> None:
        self._send_lines([json.dumps(r, separators=(",", ":")) for r in requests])

    def _send_lines(self, lines: list[str]) -> None:
        data = "".join(line + "\n" for line in lines).encode()
        proc = self.proc
        assert proc is not None

        def write() -> None:
            try:
                proc.stdin.write(data)
                proc.stdin.flush()
            except (OSError, ValueError):
                pass  # the reader sees the death and reports it

        if len(data) <= 32768:
            write()  # fits in the pipe buffer: no thread needed
        else:
            threading.Thread(target=write, daemon=True).start()

    def _read_line(self, deadline: float, cancel: Cancellation | None = None) -> bytes:
        proc = self.proc
        assert proc is not None
        fd = proc.stdout.fileno()
        while b"\n" not in self._buf:
            if cancel is not None and cancel.cancelled:
                raise _Cancelled()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _TimedOut()
            ready, _, _ = select.select([fd], [], [], min(remaining, POLL_S))
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                code = proc.wait()
                raise _ProcessDied(_describe_exit(code))
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line

    def _read_reply(
        self, accept: Callable[[dict[str, Any]], bool], timeout: float, cancel: Cancellation | None = None
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            line = self._read_line(deadline, cancel)
            try:
                reply = json.loads(line)
            except ValueError:
                reply = None
            if isinstance(reply, dict) and accept(reply):
                return reply
            if isinstance(reply, dict) and reply.get("type") == "error":
                raise _ProtocolError(str(reply.get("message")))
            if line.strip():
                self.stats.garbage_lines += 1
                self.stats.note(f"{self.name}: ignored stray output: {line[:120]!r}")

    # -- running --------------------------------------------------------------------------------

    def run_batch(
        self, device: str, programs: Sequence[dict[str, Any]], target_id: str, cancel: Cancellation | None = None
    ) -> list[Trace]:
        """Runs wire-form programs on ``device``; one trace per program, in order, always. When
        ``cancel`` triggers, returns within about ``POLL_S``: the process is killed and every
        program without a trace gets a ``CANCELLED`` one. Once the process is ``given_up`` on,
        every program gets a ``timeout`` trace at once."""
        traces: list[Trace] = []
        pending = list(programs)
        while pending:
            if cancel is not None and cancel.cancelled:
                traces.extend(
                    Trace.failed(target_id, CANCELLED, f"{self.name}: cancelled before it gave a trace")
                    for _ in pending
                )
                break
            if self.given_up is not None:
                traces.extend(Trace.failed(target_id, TIMEOUT, self.given_up) for _ in pending)
                break
            try:
                self.ensure_started(cancel)
            except _Cancelled:
                continue  # the check above fills in the traces
            except SetupError as e:
                traces.extend(Trace.failed(target_id, CRASH, str(e)) for _ in pending)
                break
            ids = [next(self._ids) for _ in pending]
            self._send_lines([_run_request(i, device, p) for i, p in zip(ids, pending)])
            done = 0
            try:
                for i, program in zip(ids, pending):
                    budget = self.timeout_s * (1 + len(program.get("ops", ())) / 64)
                    reply = self._read_reply(
                        lambda r, i=i: r.get("type") == "trace" and r.get("id") == i, budget, cancel
                    )
                    self._timeouts_in_a_row = 0
                    try:
                        traces.append(Trace.from_wire(target_id, reply))
                    except MalformedTrace as e:
                        # The reply was read whole, so the stream is still in step: go on.
                        self.stats.malformed_traces += 1
                        msg = f"{self.name}: {e}"
                        self.stats.note(msg)
                        traces.append(Trace.failed(target_id, "error", msg))
                    done += 1
            except _Cancelled:
                self._kill(self.proc)  # its replies are out of step with the next batch's
                self.proc = None
            except _ProcessDied as e:
                self.stats.crashes += 1
                self._timeouts_in_a_row = 0
                msg = f"{self.name} died running this program ({e}){self._tail()}"
                self.stats.note(msg)
                traces.append(Trace.failed(target_id, CRASH, msg))
                self.proc = None
                done += 1
            except _TimedOut:
                self.stats.timeouts += 1
                self._timeouts_in_a_row += 1
                msg = f"{self.name} gave no trace within its timeout; killed and restarted"
                self.stats.note(msg)
                traces.append(Trace.failed(target_id, TIMEOUT, msg))
                if self.proc is not None:
                    self._kill(self.proc)
                self.proc = None
                done += 1
                if self._timeouts_in_a_row >= self.hung_after:
                    self._check_alive(device, cancel)
            except _ProtocolError as e:
                # The probe rejected our request: a harness bug or a stale probe; report, go on.
                self._timeouts_in_a_row = 0
                traces.append(Trace.failed(target_id, "error", f"protocol error: {e}"))
                self.stats.note(f"{self.name}: protocol error: {e}")
                self.proc is not None and self._kill(self.proc)
                self.proc = None
                done += 1
            pending = pending[done:]
        return traces

    def _check_alive(self, device: str, cancel: Cancellation | None) -> None:
        """After ``hung_after`` programs in a row without a trace, an empty program decides: a
        process that answers it is alive (those programs hang it, and each keeps its ``timeout``
        trace, a finding); one that does not is given up on for the rest of the session."""
        n, wait = self._timeouts_in_a_row, min(self.timeout_s, PING_TIMEOUT_S)
        try:
            self.ensure_started(cancel)
            i = next(self._ids)
            self._send([{"type": "run", "id": i, "device": device, "program": _PING}])
            self._read_reply(lambda r: r.get("type") == "trace" and r.get("id") == i, wait, cancel)
            self._timeouts_in_a_row = 0
            return
        except _ProtocolError:  # it read the request and answered: alive
            self._timeouts_in_a_row = 0
            return
        except _Cancelled:
            self._kill(self.proc)
            self.proc = None
            return  # not decided: the next timeout checks again
        except SetupError as e:
            why = f"and it cannot restart: {e}"
        except _ProcessDied as e:
            why = f"and it died on an empty program ({e})"
            self.proc = None
        except _TimedOut:
            why = f"nor one for an empty program within {wait:g}s"
            self._kill(self.proc)
            self.proc = None
        self.given_up = (
            f"{self.name}: given up after {n} timeouts in a row (no trace for {n} programs, "
            f"{why}); its programs are not run for the rest of the session"
        )
        self.stats.note(self.given_up)


def _hello_problem(hello: dict[str, Any]) -> str | None:
    """What makes a handshake of the right protocol unusable, if anything: the fields target
    discovery reads (PROTOCOL.md, ``hello``)."""
    devices = hello.get("devices")
    if not isinstance(devices, list) or not all(
        isinstance(d, dict) and isinstance(d.get("name"), str) for d in devices
    ):
        return "`devices` is not a list of objects with a string `name`"
    for d in devices:
        if d.get("differs_on") is not None and not isinstance(d["differs_on"], list):
            return f"`differs_on` of device {d['name']!r} is not a list"
        wait = d.get("program_timeout_s")
        if wait is not None and (isinstance(wait, bool) or not isinstance(wait, (int, float)) or not wait > 0):
            return f"`program_timeout_s` of device {d['name']!r} is not a positive number"
    for key in ("ops", "methods"):
        if not isinstance(hello.get(key, []), list):
            return f"`{key}` is not a list"
    if not isinstance(hello.get("versions", {}), dict):
        return "`versions` is not an object"
    return None


class _ProcessDied(Exception):
    pass


class _TimedOut(Exception):
    pass


class _ProtocolError(Exception):
    pass


class _Cancelled(Exception):
    pass


class EncodedProgram(dict):
    """A wire-form program and its JSON text, encoded once for every target a batch goes to."""

    __slots__ = ("text",)

    def __init__(self, wire: dict[str, Any]):
        super().__init__(wire)
        self.text = json.dumps(wire, separators=(",", ":"))


def _run_request(id: int, device: str, program: dict[str, Any]) -> str:
    """The ``run`` request line as ``json.dumps`` writes it, reusing an encoded program's text."""
    text = program.text if isinstance(program, EncodedProgram) else json.dumps(program, separators=(",", ":"))
    return f'{{"type":"run","id":{int(id)},"device":{json.dumps(device)},"program":{text}}}'


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


class Target:
    """One framework on one device: ``framework:device``. Owns its own process, so targets run
    concurrently and a crash in one never touches another."""

    def __init__(self, info: TargetInfo, process: ProbeProcess):
        self.info = info
        self.process = process

    @property
    def id(self) -> str:
        return self.info.id

    def needed(self, program: Program) -> bool:
        """False when ``program`` has none of the ops where this variant differs from its plain
        device: its trace would be the plain device's, so a campaign need not run it here."""
        ops = self.info.differs_on
        return ops is None or any(op.kind in ops for op in program.ops)

    def run(self, program: Program) -> Trace:
        return self.run_batch([program])[0]

    def run_batch(self, programs: Sequence[Program]) -> list[Trace]:
        return self.run_wire([p.to_wire() for p in programs])

    def run_wire(self, programs: Sequence[dict[str, Any]], cancel: Cancellation | None = None) -> list[Trace]:
        return self.process.run_batch(self.info.device, programs, self.id, cancel)

    def restart(self) -> None:
        """Stops this target's process and starts a fresh one (``SetupError`` when it cannot)."""
        self.process.start()

    def close(self) -> None:
        self.process.stop()

    def __repr__(self) -> str:
        return f"Target({self.id})"
