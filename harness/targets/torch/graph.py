"""The ``graph`` variant: each run of ops that the op table fuses (``OpSpec.fuses``) runs as one
``torch.compile``d function, the way a user compiles a block of tensor code, and is observed only
after the run's last op.

The per-op compiling variants (``compile``, ``inductor``) compile each statement of an op on its
own, so no graph ever holds two ops: a snapshot that is a view and the write through it meet only
in eager code between two graphs. Here they meet inside one graph, where functionalization turns
the write into an out-of-place op and AOTAutograd writes the mutations and the aliased outputs
back at the end, which is what this variant tests against eager torch.

How it runs: the session runs every op eagerly, as the ``plain`` variant does, to learn the lines
the op is spelled as (a line's text depends on the tensors it meets: shapes, which module holds a
parameter). ``GraphReplay`` replays those lines in a namespace of its own: a non-fusing op's
lines as they are, and a run of fusing ops' lines as one compiled function
(``transcript.compiled_line`` of the run's text), when the run ends. The observations are the
replay's tensors: the eager session only writes the program.

Invariants: the replay's namespace holds, after every op that is no run's inner op, a value for
every variable the eager session's names are bound to; an inner op of a run (``end_op`` True) is
not observed, and its trace step says so (``fused``, PROTOCOL.md), so the oracle compares the
variant with other targets only after a run's last op (``Trace.coarsened``). An op whose eager
call raised ends its run: the run so far is compiled and run, then the op's lines run eagerly, so
both sides fail at the same line and hold the same state after it.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.case import ops as op_table
from harness.targets.torch.transcript import MODULES, Transcript, compiled_line, run_line


def op_fuses(raw) -> bool:
    """Whether a program's op (as the request gives it, possibly malformed) is of a kind the op
    table fuses."""
    kind = raw.get("op") if isinstance(raw, dict) else None
    return isinstance(kind, str) and kind in op_table.OPS and op_table.OPS[kind].fuses


class GraphReplay:
    """The replay of one program's eager lines, runs of fusing ops compiled as one function.

    ``author`` is the eager session's transcript: the lines each op ran, and each case name's
    variable (``Transcript.names``). The replay's own transcript (``to_json``) is what it ran: the
    prologue, then per op its lines, with a run's compiled function defined and called where the
    run's last lines were, and nothing for the ops before them in the run."""

    def __init__(self, author: Transcript, variant: str, program_ops: Sequence) -> None:
        self.author, self.variant = author, variant
        self.fuses = [op_fuses(raw) for raw in program_ops]
        self.ns: dict = {name: module for name, (module, _) in MODULES.items()}
        self.ops: list[list[str]] = []
        self.index = -1  # the op running now
        self._pending: list[str] = []  # the lines of the run not run yet
        self._pending_at = -1  # the last op that added lines to it
        self._failed = False  # the op running now raised on the eager side
        self.keep: dict[int, object] = {}  # every value ever bound, by id: ids are never reused
        for line in author.prologue:
            run_line(line, self.ns)
        self._keep_bound()

    def begin_op(self) -> None:
        self.index += 1
        self.ops.append([])
        self._failed = False

    def ran(self, lines: Sequence[str]) -> None:
        """The op running now ran ``lines`` eagerly: they join the run."""
        if lines:
            self._pending.extend(lines)
            self._pending_at = self.index

    def failed(self, lines: Sequence[str]) -> None:
        """The op running now raised on the eager side after ``lines`` (the last one raised): the
        run before it is compiled and run, then ``lines`` run eagerly, where the same line fails
        (its error is the eager side's, which the trace reports)."""
        self._failed = True
        try:
            self._flush()
        except Exception:  # noqa: BLE001 - the op fails anyway; its eager error is the one reported
            pass
        for line in lines:
            self.ops[self.index].append(line)
            try:
                run_line(line, self.ns)
            except Exception:  # noqa: BLE001 - the eager side raised here too
                break
        self._keep_bound()

    def end_op(self) -> bool:
        """After the op running now: True when it is an inner op of a run (it fuses, and so does
        the next op), whose effects show after the run's last op; else the run ends here and is run
        (an exception is the compiled function's: the op fails)."""
        i = self.index
        if not self._failed and self.fuses[i] and i + 1 < len(self.fuses) and self.fuses[i + 1]:
            return True
        if not self._failed:
            try:
                self._flush()
            finally:
                self._keep_bound()
        return False

    def _flush(self) -> None:
        lines, at = self._pending, self._pending_at
        self._pending = []
        if not lines:
            return
        if not self.fuses[at]:  # a model-level op: its lines as the eager side ran them
            for line in lines:
                self.ops[at].append(line)
                run_line(line, self.ns)
            return
        fn = compiled_line("\n".join(lines), self.variant)
        self.ops[at].extend(fn.source(self.author.helper("graph")))
        fn.call(self.ns)

    def _keep_bound(self) -> None:
        self.keep.update((id(v), v) for v in self.ns.values())

    def value(self, name: str):
        """What the replay's variable of the case name ``name`` holds."""
        return self.ns[self.author.names[name]]

    def to_json(self) -> dict:
        """The replay's transcript, as the protocol's ``transcript`` field (``PROTOCOL.md``)."""
        return {
            "prologue": list(self.author.prologue),
            "ops": [list(lines) for lines in self.ops],
            "names": dict(self.author.names),
        }
