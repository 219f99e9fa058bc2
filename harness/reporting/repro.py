"""A replayed case in the terminal: the side-by-side table model (``table.build_table``) of a
``ReproResult`` (``harness.fuzzing.replay``) in compact cells, and its findings."""

from __future__ import annotations

import numpy as np

from harness.case.ir import Program
from harness.fuzzing.replay import ReproResult
from harness.reporting.table import Cell, Note, Row, Table, build_table


def _fmt_value(v: np.ndarray | None) -> str:
    if v is None:
        return "—"
    text = np.array2string(v, precision=5, separator=",", suppress_small=True, max_line_width=60)
    return " ".join(text.split())


def terminal_cell(row: Row, c: Cell) -> str:
    """A terminal cell: a snapshot's verdict, or a tensor's final value (5 digits)."""
    if row.snapshot:
        return c.verdict or "—"
    if c.failed is not None:
        return c.failed
    return _fmt_value(c.value) if c.initialized else "uninitialised"


def result_table(result: ReproResult) -> Table:
    return build_table(result.program, result.traces, result.verdict_maps)


def table_rows(result: ReproResult) -> list[tuple[str, list[str], bool]]:
    """(row label, cell per target, divergent?) for every tensor and snapshot, as the terminal
    shows them; which rows diverge is the table model's one rule (``table``)."""
    return [(r.label, [terminal_cell(r, c) for c in r.cells], r.divergent) for r in result_table(result).rows]


def _terminal_note(program: Program, n: Note) -> str:
    if n.op is None:
        return f"  {n.target}: {n.status}: {n.message}"
    return f"  {n.target} op {n.op} ({program.ops[n.op].kind}): {n.status}" + (f": {n.message}" if n.message else "")


def render(result: ReproResult, console=None) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.measure import Measurement
    from rich.table import Table as RichTable

    console = console or Console()
    # Titles, names and values hold brackets (``dst[i] = src[j]``, ``[[1., 2.]]``): text, not markup.
    title = escape(result.program.title or "case")
    model = result_table(result)
    table = RichTable(title=title, show_lines=False)
    table.add_column("tensor / snapshot", style="bold")
    for tid in model.targets:
        table.add_column(tid)
    for row in model.rows:
        style = "bold red" if row.divergent else None
        cells = [escape(terminal_cell(row, c)) for c in row.cells]
        table.add_row(escape(row.label), *[f"[{style}]{c}[/]" if style else c for c in cells])
    if not console.is_terminal:
        # A pipe or a log has no width to fit: the table gets its natural width, so no target id
        # or value is cut to the 80 columns rich assumes there.
        natural = Measurement.get(console, console.options.update_width(10_000), table).maximum
        console.width = max(console.width, natural)
    console.print(table)
    notes = [_terminal_note(result.program, n) for n in model.notes]
    if notes:
        console.print("[dim]Ops a target could not run:[/]")
        for n in notes:
            console.print(n, markup=False, highlight=False)
    if not result.compared:
        console.print(f"[bold red]{escape(result.not_compared()[0].upper() + result.not_compared()[1:])}.[/]")
        return
    if not result.findings:
        console.print("[green]No divergence.[/]")
        return
    console.print(f"[bold]{len(result.findings)} divergence(s):[/]")
    for f in result.findings:
        entry = result.known.get(f.signature)
        outside = result.outside.get(f.signature)
        tag = (
            f"[yellow]known ({entry.id})[/]"
            if entry
            else f"[bold red]new[/] (baseline {escape(outside)}: recheck, then widen its versions)"
            if outside
            else "[bold red]new[/]"
        )
        console.print(f"  {tag} {escape(f'[{f.kind}]')} ", end="")
        console.print(f.sentence(), markup=False, highlight=False)
        console.print(f"      signature: {f.signature}", markup=False, highlight=False, style="dim")
