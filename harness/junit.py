"""JUnit XML for CI: one test case per finding signature (new: a failure; known: passed, with a
note in system-out). Written atomically."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from .files import atomic_write
from typing import Any, Iterable


def junit_xml(findings: Iterable[dict[str, Any]], suite: str = "aliasfuzz") -> str:
    records = list(findings)
    by_sig: dict[str, dict[str, Any]] = {}
    for f in records:
        by_sig.setdefault(str(f.get("signature", "?")), f)
    failures = sum(1 for f in by_sig.values() if f.get("status") == "new")
    root = ET.Element("testsuites", name=suite, tests=str(len(by_sig)), failures=str(failures), errors="0")
    ts = ET.SubElement(root, "testsuite", name=suite, tests=str(len(by_sig)), failures=str(failures),
                       errors="0", skipped="0")
    for sig, f in by_sig.items():
        case = ET.SubElement(ts, "testcase", classname=f"aliasfuzz.{f.get('kind', 'finding')}", name=sig,
                             time=str(f.get("seconds_to_find") or 0))
        sentence = str(f.get("sentence", ""))
        where = f"case: {f.get('case')}" if f.get("case") else ""
        if f.get("status") == "new":
            fail = ET.SubElement(case, "failure", message=sentence, type="divergence")
            fail.text = "\n".join(x for x in (sentence, f"signature: {sig}", where,
                                              f"reproduce: aliasfuzz repro {f.get('case')}" if f.get("case") else "")
                                  if x)
        else:
            out = ET.SubElement(case, "system-out")
            out.text = "\n".join(x for x in (f"known divergence (baseline {f.get('baseline')}): {sentence}", where) if x)
    if not by_sig:
        ET.SubElement(ts, "testcase", classname="aliasfuzz", name="no divergence found")
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(findings: Iterable[dict[str, Any]], path: str | Path) -> Path:
    return atomic_write(path, junit_xml(findings))
