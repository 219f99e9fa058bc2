"""JUnit XML for CI: one test case per finding signature (new: a failure; known: passed, with a
note in system-out), and before them one failing test case per harness error (classname
``aliasfuzz.harness``: aliasfuzz itself raised, its traceback in the failure). Written
atomically; a file that cannot be written is a ``ReportError`` (the journal is intact)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from harness.files import atomic_write
from harness.judging.harness_errors import HARNESS_ERROR
from harness.reporting.report import cannot_write

# Characters XML 1.0 cannot hold at all (an exception message may carry any of them).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _x(v: Any) -> str:
    return _NOT_XML.sub("\ufffd", "" if v is None else str(v))


def junit_xml(findings: Iterable[dict[str, Any]], suite: str = "aliasfuzz") -> str:
    records = [f for f in findings if isinstance(f, dict)]
    errors = [f for f in records if f.get("kind") == HARNESS_ERROR]
    by_sig: dict[str, dict[str, Any]] = {}
    for f in records:
        if f.get("kind") != HARNESS_ERROR:
            by_sig.setdefault(_x(f.get("signature", "?")), f)
    tests = len(errors) + len(by_sig)
    failures = len(errors) + sum(1 for f in by_sig.values() if f.get("status") == "new")
    root = ET.Element("testsuites", name=suite, tests=str(tests), failures=str(failures), errors="0")
    skipped = sum(1 for f in by_sig.values() if f.get("status") == "flaky")
    ts = ET.SubElement(
        root, "testsuite", name=suite, tests=str(tests), failures=str(failures), errors="0", skipped=str(skipped)
    )
    names: set[str] = set()
    for f in errors:  # first: the harness itself failed
        name = base = _x(f.get("signature", HARNESS_ERROR))
        k = 1
        while name in names:
            k += 1
            name = f"{base} #{k}"
        names.add(name)
        case = ET.SubElement(ts, "testcase", classname="aliasfuzz.harness", name=name, time="0")
        sentence = _x(f.get("sentence", "aliasfuzz itself raised an exception"))
        fail = ET.SubElement(case, "failure", message=sentence, type=HARNESS_ERROR)
        lines = [f"harness error (a bug of aliasfuzz, not a framework finding): {sentence}"]
        if f.get("case"):
            lines.append(f"case: {_x(f.get('case'))}")
        fail.text = "\n".join([*lines, "", _x(f.get("detail") or "(no traceback recorded)")])
    for sig, f in by_sig.items():
        case = ET.SubElement(
            ts,
            "testcase",
            classname=_x(f"aliasfuzz.{f.get('kind', 'finding')}"),
            name=sig,
            time=_x(f.get("seconds_to_find") or 0),
        )
        sentence = _x(f.get("sentence", ""))
        where = f"case: {_x(f.get('case'))}" if f.get("case") else ""
        if f.get("status") == "new":
            fail = ET.SubElement(case, "failure", message=sentence, type="divergence")
            fail.text = "\n".join(
                x
                for x in (
                    sentence,
                    f"signature: {sig}",
                    where,
                    f"reproduce: aliasfuzz repro {_x(f.get('case'))}" if f.get("case") else "",
                )
                if x
            )
        elif f.get("status") == "flaky":  # not a failure: it did not show on every fresh run
            shown = f"shown in {_x(f.get('confirmed'))} of {_x(f.get('confirm_runs'))} runs on fresh probe processes"
            ET.SubElement(case, "skipped", message=f"flaky ({shown}): {sentence}")
        else:
            out = ET.SubElement(case, "system-out")
            out.text = "\n".join(
                x for x in (f"known divergence (baseline {_x(f.get('baseline'))}): {sentence}", where) if x
            )
    if not tests:
        ET.SubElement(ts, "testcase", classname="aliasfuzz", name="no divergence found")
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(findings: Iterable[dict[str, Any]], path: str | Path, journal: str | Path = "findings.jsonl") -> Path:
    """Writes the JUnit XML atomically. Raises ``ReportError`` (one line naming the file and
    saying the journal is intact) when it cannot be written: full disk, read-only, a directory."""
    text = junit_xml(findings)
    try:
        return atomic_write(path, text)
    except OSError as e:
        raise cannot_write(path, e, journal) from None
