"""The semantics matrix: for every snapshot method and every op class that can change a source,
whether the snapshot follows its source or keeps its value, on every target.

It is the porting table a person reads before moving code from PyTorch: rows are (method, op
class), columns are targets, a cell is the snapshot's verdict (``follows``, ``keeps``,
``unchanged`` when the op left the source as it was) or why there is none (``unsupported``, or the
op that failed). Everything comes from the op table and the targets: each row is a small case
(``row_case``) run like any other, and a cell that differs from the reference framework's is
marked. ``aliasfuzz matrix`` writes it as Markdown and HTML with the cases beside them; the
current one lives in ``docs/matrix/``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.case import ops
from harness.case.case_file import write_case
from harness.case.ir import CaseError, Program, TensorDecl, check_program
from harness.errors import InputError
from harness.files import atomic_write, output_file_problem
from harness.judging.pairs import REFERENCE_FRAMEWORK, split_target_id
from harness.judging.verdicts import verdicts
from harness.reporting.html import CSS, escape
from harness.targets.registry import RUST_SCAFFOLDS
from harness.targets.reproducers import torch_script, transcribe, write_rust_project
from harness.targets.trace import Trace

#: The line that marks ``matrix.md`` and ``matrix.html`` as written by ``aliasfuzz matrix`` (an
#: HTML comment: neither page shows it). Only a folder whose pages carry it is written over
#: (``check_out``): a ``matrix.md`` of the user's own is never replaced.
MARKER = "<!-- written by `aliasfuzz matrix`: the next run replaces this file -->"
#: The pages ``write`` puts in its folder (beside ``cases/``).
PAGES = ("matrix.md", "matrix.html")

#: The op classes of the rows: the ops that change the source after the snapshot is taken, as a
#: case file spells them (``check_program`` makes them ops).
OP_CLASSES: dict[str, tuple[dict, ...]] = {
    "write": ({"op": "write", "target": "w", "value": None},),
    "fill": ({"op": "fill", "target": "w", "value": 9.0},),
    "scale": ({"op": "scale", "target": "w", "factor": 2.0},),
    "step": ({"op": "step", "optimizer": "sgd", "lr": 1.0},),
    "move": ({"op": "move", "target": "w", "device": "home"}, {"op": "step", "optimizer": "sgd", "lr": 1.0}),
}
#: The source's shape: the first of these a method can be taken of.
SOURCE_SHAPES = ((2, 2), (1, 2), (2, 1, 2))


@dataclass(frozen=True)
class Row:
    method: str
    op_class: str
    program: Program

    @property
    def stem(self) -> str:
        return f"{self.method}--{self.op_class}"


def row_case(method: str, op_class: str) -> Program | None:
    """The case of one row: a param ``w``, its snapshot ``s`` by ``method``, then the op class's
    ops; None when the method can be taken of none of ``SOURCE_SHAPES``."""
    for shape in SOURCE_SHAPES:
        n = 1
        for d in shape:
            n *= d
        w = TensorDecl("w", "param", shape, tuple(float(i + 1) for i in range(n)))
        changes = [
            dict(raw, value=[float(10 + i) for i in range(n)]) if raw["op"] == "write" else dict(raw)
            for raw in OP_CLASSES[op_class]
        ]
        try:
            program_ops = check_program((w,), [{"op": "snapshot", "name": "s", "of": "w", "method": method}, *changes])
        except CaseError:
            continue
        title = f"matrix: a `{method}` snapshot of a param across `{op_class}`"
        return Program((w,), program_ops, title=title)
    return None


def rows() -> list[Row]:
    out = []
    for m in ops.METHOD_TABLE:
        for op_class in OP_CLASSES:
            program = row_case(m.name, op_class)
            if program is not None:
                out.append(Row(m.name, op_class, program))
    return out


def cell(program: Program, trace: Trace) -> str:
    """One target's word for a row: the snapshot's verdict, or why it has none."""
    if not trace.ok:
        return trace.status
    snap = trace.steps[0] if trace.steps else None
    if snap is None or snap.status != "ok":
        return snap.status if snap else "error"
    for i, step in enumerate(trace.steps[1:], start=1):
        if step.status != "ok":
            return f"{step.status} at {program.ops[i].kind}"
    return verdicts(program, trace)["s"].summary


def snapshot_call(program: Program, framework: str) -> str | None:
    """The call that takes a row's snapshot ``s``, as ``framework``'s transcript of the row spells
    it (``w.clone()``, ``w.as_tensor().clone()``); None where the framework has no transcript or
    did not make the call."""
    trace = transcribe(framework, program)
    transcript = (trace or {}).get("transcript") or {}
    lines = (transcript.get("ops") or [[]])[0]
    var = (transcript.get("names") or {}).get("s")
    if trace is None or trace.get("status") != "ok" or not lines or var is None or trace["steps"][0]["status"] != "ok":
        return None
    # `let s = w.clone();`, or with its type where the framework's needs one (`let s: Tensor<2> = ...`)
    m = re.fullmatch(rf"(?:let )?{re.escape(var)}(?:: [^=]+)? = (.+?);?", lines[-1])
    return m.group(1) if m else None


@dataclass
class Matrix:
    targets: list[str]
    rows: list[Row]
    cells: list[dict[str, str]]  # per row: target -> word
    versions: Mapping[str, Mapping[str, str]]
    #: per row: target -> the snapshot's call as the target's framework spells it (``snapshot_call``)
    calls: list[dict[str, str | None]] = field(default_factory=list)

    def call(self, k: int, target: str) -> str | None:
        return self.calls[k].get(target) if k < len(self.calls) else None

    @property
    def reference(self) -> str | None:
        return next(
            (
                t
                for t in self.targets
                if split_target_id(t)[0] == REFERENCE_FRAMEWORK and split_target_id(t)[1] == split_target_id(t)[2]
            ),
            None,
        )

    def differs(self, k: int, target: str) -> bool:
        """Whether row ``k``'s cell on ``target`` says otherwise than the reference framework's."""
        ref = self.reference
        return ref is not None and target != ref and self.cells[k][target] != self.cells[k][ref]


def build(runner) -> Matrix:
    """Runs every row on the runner's targets (one batch)."""
    all_rows = rows()
    results = runner.run([r.program for r in all_rows], every_target=True)
    cells = [{t: cell(r.program, traces[t]) for t in runner.ids} for r, traces in zip(all_rows, results)]
    spelled: dict[tuple[str, str], str | None] = {}  # (method, framework): a method's call is one per framework
    calls = []
    for r in all_rows:
        row = {}
        for t in runner.ids:
            framework = split_target_id(t)[0]
            if (r.method, framework) not in spelled:
                spelled[r.method, framework] = snapshot_call(r.program, framework)
            row[t] = spelled[r.method, framework]
        calls.append(row)
    return Matrix(list(runner.ids), all_rows, cells, {t: dict(i.versions) for t, i in runner.infos.items()}, calls)


def _versions_line(m: Matrix) -> str:
    """The frameworks' versions (not the interpreter's or the probes' own: the matrix is theirs)."""
    seen: dict[str, str] = {}
    for t in m.targets:
        for k, v in m.versions.get(t, {}).items():
            if k not in ("python", "numpy") and not k.endswith("_probe"):
                seen.setdefault(k, v)
    return ", ".join(f"{k} {v}" for k, v in sorted(seen.items()))


def render_markdown(m: Matrix, case_dir: str = "cases") -> str:
    """The matrix as Markdown; a cell that differs from the reference framework is bold."""
    out = [
        MARKER,
        "# Semantics matrix",
        "",
        "Does a snapshot of a parameter follow later changes of it (`follows`) or keep its value",
        "(`keeps`)? One row per snapshot method and op class, one column per target; **bold**: not",
        f"what the reference framework ({REFERENCE_FRAMEWORK}) does. `unchanged`: the op left the source",
        "as it was (a parameter burn's `to_device` stopped training); `unsupported`: the framework has",
        "no such call. A cell names the call that takes the snapshot as the framework's own reproducer",
        "spells it (`s` is the snapshot, `w` the parameter). Each row links its case (`aliasfuzz repro`",
        "replays it; `--reproducers` writes stand-alone scripts). Generated by `aliasfuzz matrix`.",
        "",
        f"Versions: {_versions_line(m)}.",
        "",
        "| method | op | " + " | ".join(m.targets) + " | case |",
        "|---|---|" + "---|" * len(m.targets) + "---|",
    ]
    for k, r in enumerate(m.rows):
        words = [
            (f"`{_md_code(call)}` " if (call := m.call(k, t)) else "")
            + (f"**{m.cells[k][t]}**" if m.differs(k, t) else m.cells[k][t])
            for t in m.targets
        ]
        out.append(f"| `{r.method}` | {r.op_class} | " + " | ".join(words) + f" | [case]({case_dir}/{r.stem}.toml) |")
    return "\n".join(out) + "\n"


def _md_code(text: str) -> str:
    """``text`` inside a Markdown table's code span: a ``|`` would end the cell."""
    return text.replace("|", "\\|")


def render_html(m: Matrix, case_dir: str = "cases") -> str:
    """The matrix as one self-contained page; a differing cell has the class ``differs``."""

    head = "".join(f"<th>{escape(t)}</th>" for t in m.targets)
    body = []
    for k, r in enumerate(m.rows):
        tds = "".join(
            f'<td class="mono{" differs" if m.differs(k, t) else ""}">'
            + (f"<code>{escape(call)}</code> " if (call := m.call(k, t)) else "")
            + f"{escape(m.cells[k][t])}</td>"
            for t in m.targets
        )
        link = f'<a href="{escape(case_dir)}/{escape(r.stem)}.toml">case</a>'
        body.append(
            f"<tr><td><code>{escape(r.method)}</code></td><td>{escape(r.op_class)}</td>{tds}<td>{link}</td></tr>"
        )
    return "\n".join(
        [
            "<!doctype html>",
            MARKER,
            '<html lang="en"><head><meta charset="utf-8"><title>aliasfuzz semantics matrix</title>',
            f"<style>{CSS}td.differs{{background:#fde2e1;font-weight:bold}}</style></head><body>",
            "<h1>Semantics matrix</h1>",
            f"<p>Snapshot method &times; op class; highlighted: not what {REFERENCE_FRAMEWORK} does. "
            f"Versions: {escape(_versions_line(m))}.</p>",
            f'<table class="matrix"><tr><th>method</th><th>op</th>{head}<th>case</th></tr>',
            *body,
            "</table>",
            "</body></html>",
            "",
        ]
    )


def _written_by_matrix(page: Path) -> bool:
    """Whether ``page`` (a regular file) is one ``aliasfuzz matrix`` wrote: its first or second
    line (after ``<!doctype html>``) is ``MARKER``."""
    try:
        with open(page, "rb") as f:
            head = f.read(4096).decode("utf-8", "replace").splitlines()[:2]
    except OSError:
        return False
    return MARKER in head


def check_out(out: Path) -> None:
    """Refuses, before any work (``InputError`` naming ``--out``), a folder ``write`` must not
    write into: a path that is no folder; a folder holding anything while it holds no
    ``matrix.md`` that ``aliasfuzz matrix`` wrote (a user's folder, a user's own ``matrix.md``:
    never overwritten); a page there that is not a regular file or was not written by
    ``aliasfuzz matrix``; a folder that cannot be written, or cannot be created (its nearest
    existing parent is no folder, or is not writable). Accepted: a new or empty folder, or one
    an earlier ``aliasfuzz matrix`` wrote."""
    import os
    import tempfile

    def refuse(why: str) -> InputError:
        return InputError(f"--out {out}: {why}")

    if out.exists() or out.is_symlink():
        if not out.is_dir():
            raise refuse("not a folder (give --out a new or empty folder)")
        try:
            held = sorted(e.name for e in os.scandir(out))
        except OSError as e:
            raise refuse(f"cannot read the folder ({e.strerror or e})") from None
        for name in PAGES:
            page = out / name
            if not (page.exists() or page.is_symlink()):
                continue
            if problem := output_file_problem(page):
                raise refuse(f"{name}: {problem}")
            if page.is_symlink() or not _written_by_matrix(page):
                raise refuse(
                    f"{name} was not written by aliasfuzz matrix: not overwritten (give --out a new or empty folder)"
                )
        if held and "matrix.md" not in held:
            raise refuse(f"not empty and not a matrix folder (it holds {held[0]!r}): give --out a new or empty folder")
        try:  # a real write, not os.access: a read-only mount, an ACL
            fd, probe = tempfile.mkstemp(prefix=".aliasfuzz-write-check-", dir=out)
            os.close(fd)
            os.unlink(probe)
        except OSError as e:
            raise refuse(f"cannot write ({e.strerror or e})") from None
        return
    parent = out.parent
    while not (parent.exists() or parent.is_symlink()) and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise refuse(f"cannot be created: {parent} is not a folder")
    if not os.access(parent, os.W_OK):
        raise refuse(f"cannot be created: {parent} is not writable")


def write(m: Matrix, out: Path, reproducers: bool = False) -> list[Path]:
    """``matrix.md``, ``matrix.html`` and ``cases/<method>--<op>.toml`` under ``out``; with
    ``reproducers``, each case's torch script and candle / burn projects beside it. Refuses a
    folder it must not write into (``check_out``) before writing anything."""

    check_out(out)
    cases = out / "cases"
    cases.mkdir(parents=True, exist_ok=True)
    written = [atomic_write(out / "matrix.md", render_markdown(m)), atomic_write(out / "matrix.html", render_html(m))]
    for r in m.rows:
        written.append(write_case(r.program, cases / f"{r.stem}.toml"))
        if reproducers:
            written += _reproducers(r, cases, m.targets)
    return written


def _reproducers(r: Row, cases: Path, targets: Sequence[str]) -> list[Path]:

    script = cases / f"{r.stem}.torch.py"
    script.write_text(torch_script(r.program), encoding="utf-8")
    out = [script]
    frameworks = {split_target_id(t)[0] for t in targets}
    for fw in RUST_SCAFFOLDS:
        if fw in frameworks:
            pkg = f"matrix_{r.stem}_{fw}".replace("-", "_")
            out.append(write_rust_project(cases / f"{r.stem}-{fw}", pkg, fw, r.program))
    return out
