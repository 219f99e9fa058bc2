"""Known divergences: a TOML baseline of expected findings, each with a reason and a reference.

An entry matches a finding when every field it gives matches the finding's (``fnmatch`` patterns;
``frameworks`` matches the frameworks of the two targets in either order). Matching findings are
``known``; the rest are ``new``. Each entry names a case under ``tests/cases/`` that shows it, and
the test suite checks that the case really produces a finding the entry matches.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Sequence

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from .ir import CaseError
from .oracle import Finding
from .paths import BASELINE

MATCH_FIELDS = ("kind", "aspect", "method", "op", "sides")


@dataclass(frozen=True)
class KnownDivergence:
    id: str
    reason: str
    case: str
    kind: str = "*"
    aspect: str = "*"
    frameworks: tuple[str, ...] = ()
    method: str = "*"
    op: str = "*"
    # "<side a>~<side b>", in the finding's target order; several patterns: any of them
    sides: str | tuple[str, ...] = "*"
    upstream: str = ""

    def matches(self, f: Finding) -> bool:
        if not fnmatchcase(f.kind, self.kind) or not fnmatchcase(f.aspect, self.aspect):
            return False
        if not fnmatchcase(f.method or "-", self.method) or not fnmatchcase(f.op_label, self.op):
            return False
        if self.frameworks:
            fws = sorted(t.split(":", 1)[0] for t in f.targets)
            if fws != sorted(self.frameworks) and not (len(self.frameworks) == 1 and
                                                      all(x == self.frameworks[0] for x in fws)):
                return False
        patterns = (self.sides,) if isinstance(self.sides, str) else self.sides
        if not any(fnmatchcase("~".join(f.sides), p) for p in patterns):
            return False
        return True


@dataclass
class Baseline:
    entries: list[KnownDivergence]
    path: str = ""

    def match(self, f: Finding) -> KnownDivergence | None:
        for e in self.entries:
            if e.matches(f):
                return e
        return None


def load_baseline(path: str | Path | None = None) -> Baseline:
    """The baseline at ``path``, or the bundled one."""
    path = Path(path) if path else BASELINE
    if not path.exists():
        return Baseline([], str(path))
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise CaseError(path, "", f"invalid TOML: {e}") from None
    entries = []
    allowed = {"id", "reason", "case", "kind", "aspect", "frameworks", "method", "op", "sides", "upstream"}
    for i, raw in enumerate(doc.get("known", [])):
        where = f"known[{i}]"
        for key in raw:
            if key not in allowed:
                raise CaseError(path, f"{where}.{key}", "unknown field")
        for key in ("id", "reason", "case"):
            if not isinstance(raw.get(key), str) or not raw[key]:
                raise CaseError(path, f"{where}.{key}", "missing (a non-empty string)")
        fields: dict[str, Any] = dict(raw)
        fields["frameworks"] = tuple(raw.get("frameworks", ()))
        sides = raw.get("sides", "*")
        if isinstance(sides, list) and sides and all(isinstance(x, str) for x in sides):
            fields["sides"] = tuple(sides)
        elif not isinstance(sides, str):
            raise CaseError(path, f"{where}.sides", "a pattern or a non-empty list of patterns")
        entries.append(KnownDivergence(**fields))
    ids = [e.id for e in entries]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise CaseError(path, "known", f"duplicate id(s): {', '.join(sorted(dup))}")
    return Baseline(entries, str(path))


def classify(findings: Sequence[Finding], baseline: Baseline) -> list[tuple[Finding, KnownDivergence | None]]:
    return [(f, baseline.match(f)) for f in findings]
