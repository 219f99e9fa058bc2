"""Reports of a run folder: ``report.md`` and a single-file ``report.html`` (inline CSS, no
network, no JavaScript), with the stand-alone reproducers of each new or flaky finding and, for a
new finding, its upstream report draft (``hand_over``). The history page over many run folders is
``harness.reporting.history``.

Everything is rendered from the run folder alone (campaign.json, findings.json or the journal,
the case files and their repro JSON; ``loading.load_run``), so ``aliasfuzz report DIR`` can
re-render at any time. The pieces: ``loading`` (the run folder read, every path checked),
``views`` (what a report shows of a run and of a finding), ``table`` (the side-by-side table,
the terminal's too), ``markdown`` and ``html`` (the two pages).

What this module guarantees on top of them:

- A finding whose paths were refused (outside the run folder) is shown with its record and the
  refusal in place of its case, table and reproducers, and ``warn`` gets one line for it.
- Reproducers are generated in a staging folder inside the run folder, then each file replaces
  its old version atomically (``files.atomic_write``, never through a symlink out of the folder):
  a full disk leaves the old reproducers whole.
- A report that cannot be written (full disk, read-only, the path is a directory) is a
  ``ReportError`` saying the journal (findings.jsonl) is intact; the old report stays whole.

Harness errors (``kind`` ``harness-error``: aliasfuzz itself raised while judging, shrinking or
recording a program) are counted apart from findings and shown first, in their own section.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import replace
from pathlib import Path, PurePosixPath

from harness.files import atomic_write
from harness.fuzzing.run_folder import inside
from harness.fuzzing.run_loading import ReportError, Run, Warn, cannot_write, load_run, one_line
from harness.reporting.hand_over import HANDED_OVER, write_hand_over
from harness.reporting.html import render_html
from harness.reporting.markdown import render_markdown
from harness.reporting.views import FindingView, finding_view, summary_line

REPORT_MD = "report.md"
REPORT_HTML = "report.html"
HISTORY_HTML = "history.html"

__all__ = [
    "HISTORY_HTML",
    "REPORT_HTML",
    "REPORT_MD",
    "ReportError",
    "Run",
    "Warn",
    "cannot_write",
    "load_run",
    "summary_line",
    "write_reports",
    "write_run_reports",
]


def _write_reproducers(run: Run, view: FindingView, warn: Warn | None) -> None:
    """Writes the reproducers and the draft of one new or flaky finding next to its case, staged
    inside the run folder (``hand_over``); a known finding gets a note naming its baseline case,
    which ``aliasfuzz draft`` turns into reproducers. A failure is noted in the view
    (``reps_note``), never raised."""

    f, rec = view.finding, view.finding.record
    if f.harness or f.blocked or view.program is None or view.case_text is None:
        return
    if rec.status not in HANDED_OVER:
        if rec.baseline_case:
            view.reps_note = f"known: `aliasfuzz draft {rec.baseline_case}` writes the reproducers of its baseline case"
        return
    rel = PurePosixPath(rec.case)
    if not rel.name.endswith(".toml"):
        view.reps_note = f"no reproducers: {rec.case} is not a .toml file"
        return
    stage = None
    try:
        stage = Path(tempfile.mkdtemp(prefix=".reproducers-", dir=run.root))
        (stage / rel.name).write_text(view.case_text, encoding="utf-8")
        repro_text = f.read("repro")
        if repro_text is not None:
            (stage / "repro.json").write_text(repro_text, encoding="utf-8")
        staged = replace(rec, repro="repro.json" if repro_text is not None else None)
        prefix = "" if rel.parent == PurePosixPath(".") else f"{rel.parent.as_posix()}/"
        made = write_hand_over(stage, rel.name[: -len(".toml")], staged, draft=rec.status == "new", shown_in=prefix)
        for p in made:
            for src in [p] if p.is_file() else sorted(x for x in p.rglob("*") if x.is_file()):
                dest_rel = (rel.parent / src.relative_to(stage).as_posix()).as_posix()
                dest = inside(run.root, dest_rel)
                if dest is None or inside(run.root, str(PurePosixPath(dest_rel).parent), root_too=True) is None:
                    raise ReportError(f"{dest_rel}: a link out of the run folder: not written")
                atomic_write(run.path / dest_rel, src.read_text(encoding="utf-8"))
            view.reps.append((rel.parent / p.name).as_posix() + ("/" if p.is_dir() else ""))
    except Exception as e:  # noqa: BLE001 - a report never fails because of one reproducer
        view.reps_note = f"reproducers not written: {type(e).__name__}: {one_line(e)}"
    finally:
        if stage is not None:
            _remove_stage(stage, warn)


def _remove_stage(stage: Path, warn: Warn | None) -> None:
    try:
        shutil.rmtree(stage)
    except OSError as e:  # the reproducers are written; only the staging folder stays behind
        if warn is not None:
            warn(f"{stage}: cannot remove the reproducers' staging folder ({e.strerror or e})")


def write_run_reports(run: Run, warn: Warn | None = None) -> list[Path]:
    """Writes report.md and report.html (and each finding's reproducers) into the run folder.
    ``warn`` gets one line per path refused (outside the run folder). Raises ``ReportError``
    when a report cannot be written; the journal and the old report are left whole."""
    for line in run.problems if warn is not None else ():
        warn(line)
    views = [finding_view(f) for f in run.findings]
    for v in views:
        _write_reproducers(run, v, warn)
    md, page = run.path / REPORT_MD, run.path / REPORT_HTML
    for path, render in ((md, render_markdown), (page, render_html)):
        try:
            atomic_write(path, render(run, views))
        except OSError as e:
            raise cannot_write(path, e, run.folder.journal) from None
    return [md, page]


def write_reports(run_dir: str | Path, warn: Warn | None = None) -> list[Path]:
    """``write_run_reports(load_run(run_dir), warn)``."""
    return write_run_reports(load_run(run_dir), warn)
