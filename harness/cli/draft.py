"""``aliasfuzz draft CASE.toml... [--out DIR]``: the reproducers and the upstream report draft of
any case file, made by the code a campaign's report uses (``harness.reporting.hand_over``).

Each case is run on every target and judged. Each divergence the baseline does not know gets
``<stem>.issue.md`` and its reproducers in DIR, with the case and its repro JSON beside them (a
second divergence of one case is ``<stem>-2``, and so on). ``--known`` drafts the known ones too:
a baseline entry's case is how a known finding's reproducers are made on demand.

Exit status 0: drafts written; 2: a bad case or option, or a case with nothing to draft (one
line each, naming the case); 3: a harness error.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness.case.case_file import load_case
from harness.case.ir import Program
from harness.cli.exits import EXIT_HARNESS, EXIT_OK, EXIT_USAGE
from harness.errors import InputError


def register(sub) -> None:
    p = sub.add_parser("draft", help="write the reproducers and the upstream report draft of case files")
    p.add_argument("cases", nargs="*", metavar="CASE.toml")
    p.add_argument(
        "--candidates",
        action="store_true",
        help="draft every case under tests/cases that no baseline entry names and that calls itself a "
        "candidate (the project's candidate bugs), with an index.md; default --out docs/candidates",
    )
    p.add_argument("--out", help="the folder the drafts go to (default: drafts/ in the current directory)")
    p.add_argument("--known", action="store_true", help="draft the divergences the baseline knows too")
    p.add_argument(
        "--bisect",
        metavar="BISECT.json",
        help="the output of `aliasfuzz bisect --json` for the case: its table goes in the draft "
        "(default: <case>.bisect.json beside the case, when there is one)",
    )
    p.add_argument("--targets", help="comma-separated target ids or frameworks (default: all)")
    p.add_argument("--baseline", help="known-divergence baseline (default: the bundled one)")
    p.set_defaults(handler=cmd_draft)


def bisection_table(path: str) -> str:
    """The table of a saved ``aliasfuzz bisect --json`` document; a one-line ``InputError``
    naming the file and the field when it is not one."""
    from harness.triage.bisect import Bisection, Observed

    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: not a readable JSON document ({e})") from None
    for key in ("framework", "reference", "releases"):
        if not isinstance(doc, dict) or key not in doc:
            raise InputError(f"{path}: field `{key}` is missing (give the output of `aliasfuzz bisect --json`)")
    try:
        rows = [Observed(**r) for r in doc["releases"]]
        result = Bisection(str(doc["framework"]), dict(doc["reference"]), rows)
        return result.table() + f"\n\n{result.summary()}"
    except (TypeError, ValueError) as e:
        raise InputError(f"{path}: field `releases` is not a list of bisect rows ({e})") from None


def cmd_draft(args: argparse.Namespace) -> int:
    from harness.fuzzing.baseline import load_baseline
    from harness.fuzzing.replay import run_case
    from harness.judging.finding import FindingRecord
    from harness.reporting.hand_over import write_hand_over
    from harness.targets.registry import open_runner, parse_target_list

    baseline = load_baseline(args.baseline)
    cases = list(args.cases) + (candidate_cases(baseline) if args.candidates else [])
    if not cases:
        raise InputError("give CASE.toml files, or --candidates")
    programs = [(Path(c), load_case(c)) for c in cases]  # every input checked before anything runs
    drafted_signatures: set[tuple] = set()
    given = bisection_table(args.bisect) if args.bisect else None
    # A case's own bisection, saved beside it as <stem>.bisect.json (`aliasfuzz bisect --json`).
    beside = {
        path: bisection_table(str(b))
        for path, _ in programs
        if not given and (b := path.with_name(path.name.removesuffix(".toml") + ".bisect.json")).is_file()
    }
    out = Path(args.out or ("docs/candidates" if args.candidates else "drafts"))
    drafted: list[tuple[Path, str]] = []
    out.mkdir(parents=True, exist_ok=True)
    status = EXIT_OK
    base = baseline

    def draft_all(pending: list[tuple[Path, Program]], runner, last: bool = True, added=None) -> list[str]:
        """Drafts each case of ``pending`` that shows a divergence to draft on ``runner``'s targets;
        returns the candidates that showed none. ``last``: no second run follows, so a candidate
        with nothing new is drafted by its known divergences (``_chosen``). ``added``: the targets
        a second run added, where a new divergence must show to be drafted there."""
        nonlocal status
        baseline = base.for_installed(runner.infos)
        shown_none: list[str] = []
        results = [(path, program, run_case(program, runner, runner.infos, baseline)) for path, program in pending]
        if args.candidates:
            # A cause several candidate cases show (a forward's running statistics, say) is drafted
            # once, from the most specific case that shows it: the fewest ops, then the fewest
            # findings.
            results.sort(key=lambda r: (len(r[1].ops), len(r[2].findings), r[0].name))
        for path, program, result in results:
            if result.harness_errors:
                status = EXIT_HARNESS
                for f in result.harness_errors:
                    print(f"aliasfuzz: draft {path}: {f.sentence()}", file=sys.stderr)
                continue
            chosen = _chosen(path, result, args.known, args.candidates, drafted_signatures, last, added)
            drafted_signatures.update(_report_key(f) for f in chosen)
            if not chosen:
                if args.candidates:  # a candidate that shows nothing here is listed as such, not an error
                    shown_none.append(path.as_posix())
                else:
                    status = max(status, EXIT_USAGE)
                known = sorted({e.id for e in result.known.values() if e is not None})
                why = (
                    f"every divergence is known ({', '.join(known)}; --known drafts them)"
                    if known
                    else "it shows no divergence"
                    if result.compared
                    else result.not_compared()
                )
                print(f"aliasfuzz: {path}: nothing to draft: {why}", file=sys.stderr)
                continue
            case_text = path.read_text(encoding="utf-8")
            repro_json = json.dumps(result.to_json(), indent=1)
            for k, finding in enumerate(chosen):
                stem = path.name[: -len(".toml")] if path.name.endswith(".toml") else path.name
                stem += f"-{k + 1}" if k else ""
                (out / f"{stem}.toml").write_text(case_text, encoding="utf-8")
                (out / f"{stem}.json").write_text(repro_json, encoding="utf-8")
                entry = result.known.get(finding.signature)
                record = FindingRecord.found(
                    finding,
                    status="known" if entry else "new",
                    baseline=entry.id if entry else None,
                    baseline_case=entry.case if entry else None,
                    ops_before=len(program.ops),
                    ops_after=len(program.ops),
                    seconds_to_find=0.0,
                    shrink=None,
                    versions={t: info.versions for t, info in runner.infos.items()},
                )
                record = FindingRecord.from_json({**record.to_json(), "case": f"{stem}.toml", "repro": f"{stem}.json"})
                made = write_hand_over(out, stem, record, bisection=given or beside.get(path))
                drafted.append((out / f"{stem}.issue.md", path.as_posix()))
                print(f"{path}: {finding.sentence()}")
                for p in made:
                    print(f"  {p}{'/' if p.is_dir() else ''}")
        return shown_none

    second_run = args.candidates and not args.targets
    runner, _ = open_runner(parse_target_list(args.targets))
    try:
        undrafted = draft_all(programs, runner, last=not second_run)
    finally:
        runner.close()
    if second_run and undrafted:
        # A candidate of an on-request target (torch:cpu+inductor) shows only where that target
        # runs: the ones that showed nothing new get a second run on every device of the machine.
        again = [(path, program) for path, program in programs if path.as_posix() in undrafted]
        first = set(runner.infos)
        runner, _ = open_runner(None, every_device=True)
        try:
            undrafted = draft_all(again, runner, added=set(runner.infos) - first)
        finally:
            runner.close()
    if args.candidates:
        write_index(out, drafted, undrafted)
    return status


def candidate_cases(baseline) -> list[str]:
    """The project's candidate bugs: the cases under tests/cases that no baseline entry names and
    whose text calls them a candidate (the other cases there are regression cases)."""
    from harness.paths import CASES_DIR, ROOT

    named = {Path(e.case).name for e in baseline.entries if e.case}
    return [
        p.relative_to(ROOT).as_posix()
        for p in sorted(CASES_DIR.glob("*.toml"))
        if p.name not in named and "candidate" in p.read_text(encoding="utf-8").lower()
    ]


def _report_key(f) -> tuple:
    """What makes two findings one upstream report: the same divergence of the same frameworks,
    on whichever devices or variants of them."""
    return (f.kind, f.aspect, f.op_label, f.method, f.sides, tuple(t.split(":", 1)[0] for t in f.targets))


def _chosen(
    path: Path,
    result,
    known: bool,
    candidate: bool,
    drafted: set[tuple] = frozenset(),
    fallback: bool = True,
    added: set[str] | None = None,
) -> list:
    """The findings of ``result`` to draft: those the baseline does not know (all, with
    ``known``) and no earlier candidate case drafted (``drafted``: their ``_report_key``); one per
    framework-level divergence (the same one on two devices or variants of a framework is one
    report). With ``fallback``, a candidate case with nothing else to draft is drafted by its
    known ones of the framework its file is named after (``candle_...``) that no earlier case
    drafted. ``added``: the targets a second run added: only a divergence of the case's framework
    on one of them is new there."""
    from harness.judging.harness_errors import is_harness_error

    framework = path.name.split("_", 1)[0]
    real = [f for f in result.findings if not is_harness_error(f)]
    chosen = [
        f
        for f in real
        if (known or result.known.get(f.signature) is None)
        and (_report_key(f) not in drafted or not candidate)
        and (added is None or (any(t in added for t in f.targets) and _about(f, framework)))
    ]
    if not chosen and candidate and fallback:
        chosen = [f for f in real if _report_key(f) not in drafted and _about(f, framework)]
    out, seen = [], set()
    for f in chosen:
        key = _report_key(f)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def _about(f, framework: str) -> bool:
    """Whether finding ``f`` is about ``framework``: one of its sides, and the side that is not
    the reference framework's where the other is (torch's own when both are torch's)."""
    from harness.judging.pairs import REFERENCE_FRAMEWORK

    frameworks = [t.split(":", 1)[0] for t in f.targets]
    if framework not in frameworks:
        return False
    return next((fw for fw in frameworks if fw != REFERENCE_FRAMEWORK), REFERENCE_FRAMEWORK) == framework


def write_index(out: Path, drafted: list[tuple[Path, str]], undrafted: list[str]) -> None:
    """``index.md``: each draft's title, linked, with the case it was made from."""
    from harness.escaping import md_code, md_text

    lines = [
        "# Candidate upstream reports",
        "",
        "Drafts made by `make drafts` (`aliasfuzz draft --candidates`) from every case under `tests/cases` that "
        "no baseline entry names and that calls itself a candidate. Each is a draft: check it against the framework's documentation before "
        "filing.",
        "",
    ]
    for draft, case in drafted:
        first = draft.read_text(encoding="utf-8").splitlines()[0].removeprefix("# ")
        lines.append(f"- [{md_text(first)}]({draft.name}) (case {md_code(case)})")
    if undrafted:
        lines += [
            "",
            "Candidates that showed no divergence to draft in this run, on any target of its machine "
            "(a nondeterministic one may show it in another):",
            "",
            *(f"- {md_code(case)}" for case in undrafted),
        ]
    (out / "index.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
