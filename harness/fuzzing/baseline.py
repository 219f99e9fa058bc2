"""Known divergences: a TOML baseline of expected findings, each with a reason and a reference.

An entry matches a finding when every field it gives matches the finding's (``fnmatch`` patterns;
``frameworks`` matches the frameworks of the two targets in either order; ``role`` the declared
kind of the tensor a verdict or value finding is about, ``lazy:program_rng`` for a lazy tensor
of the program's one generator (``trace.subject_role``); ``detail`` the finding's detail, such as
a framework's error message, for an entry about one error; ``agrees`` a metamorphic value or
status finding's agreement with the reference framework, ``with``, ``without``, ``both``, ``neither`` or
``-`` for none (``Finding.agrees``)). Matching findings are
``known``; the rest are ``new``. Each entry names a case under ``tests/cases/`` that shows it, and
the test suite checks that the case really produces a finding the entry matches.

An entry may name the framework versions it was observed with (``versions = { burn = "0.22.1.." }``,
``harness.versions`` ranges). Given the installed versions (``for_installed``), an entry explains
only findings whose frameworks' installed versions lie in its ranges: a match outside them is a
claim nobody has checked on those versions, so the finding stays ``new`` and ``outside`` says
which entry it would have been and why (re-check with ``aliasfuzz recheck``, then widen the range).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from harness.case import values as cv
from harness.case.ir import CaseError
from harness.judging.finding import SELF_KINDS, Finding
from harness.paths import BASELINE
from harness.targets.registry import FRAMEWORKS, RELEASE_PACKAGE
from harness.versions import VersionRange

MATCH_FIELDS = ("kind", "aspect", "method", "op", "sides", "role", "detail", "agrees")


@dataclass(frozen=True)
class KnownDivergence:
    id: str
    reason: str
    case: str
    # Each match field is a pattern, or a tuple of patterns any of which matches.
    kind: str | tuple[str, ...] = "*"
    aspect: str | tuple[str, ...] = "*"
    frameworks: tuple[str, ...] = ()
    method: str | tuple[str, ...] = "*"
    op: str | tuple[str, ...] = "*"
    # "<side a>~<side b>", in the finding's target order
    sides: str | tuple[str, ...] = "*"
    # the declared kind of the tensor a verdict or value finding is about ("-": none)
    role: str | tuple[str, ...] = "*"
    # the finding's detail (an error's message: "*is the output of a function that returns multiple views*")
    detail: str | tuple[str, ...] = "*"
    # a metamorphic value or status finding's agreement with the reference framework ("-": none)
    agrees: str | tuple[str, ...] = "*"
    upstream: str = ""
    # framework -> the versions it was observed with; a framework not named: any version
    versions: tuple[tuple[str, VersionRange], ...] = ()

    def outside(self, f: Finding, installed: Mapping[str, str]) -> str | None:
        """Why the installed versions of ``f``'s frameworks lie outside this entry's ranges
        (``burn 0.23.0 is outside 0.22.1..``); None when they are inside, or not installed."""
        frameworks = {t.split(":", 1)[0] for t in f.targets}
        for fw, rng in self.versions:
            v = installed.get(fw)
            if fw in frameworks and v is not None and v not in rng:
                return f"{fw} {v} is outside {rng}"
        return None

    def matches(self, f: Finding) -> bool:
        if f.kind in SELF_KINDS and not _names_kind(self.kind, f.kind):
            return False  # a target against itself: only an entry written for that oracle explains it
        if not _any(f.kind, self.kind) or not _any(f.aspect, self.aspect):
            return False
        if not _any(f.method or "-", self.method) or not _any(f.op_label, self.op):
            return False
        if not _any(f.role or "-", self.role) or not _any(f.detail or "", self.detail):
            return False
        if not _any(f.agrees or "-", self.agrees):
            return False
        if self.frameworks:
            fws = sorted(t.split(":", 1)[0] for t in f.targets)
            if fws != sorted(self.frameworks) and not (
                len(self.frameworks) == 1 and all(x == self.frameworks[0] for x in fws)
            ):
                return False
        return _any("~".join(f.sides), self.sides)


def _names_kind(patterns: str | tuple[str, ...], kind: str) -> bool:
    """Whether the patterns name ``kind`` itself (not through a wildcard)."""
    return kind in ((patterns,) if isinstance(patterns, str) else patterns)


def _any(value: str, patterns: str | tuple[str, ...]) -> bool:
    """Whether ``value`` matches the pattern, or one of the patterns."""
    return any(fnmatchcase(value, p) for p in ((patterns,) if isinstance(patterns, str) else patterns))


@dataclass
class Baseline:
    entries: list[KnownDivergence]
    path: str = ""
    #: framework -> installed version (``for_installed``); empty: every entry's ranges are ignored
    installed: dict[str, str] = field(default_factory=dict)

    def for_installed(self, infos: Mapping[str, Any]) -> Baseline:
        """This baseline judging against the versions of the targets ``infos`` describes (target
        id -> ``TargetInfo``)."""
        installed = {}
        for info in infos.values():
            v = info.versions.get(RELEASE_PACKAGE.get(info.framework, info.framework))
            if v is not None:
                installed[info.framework] = v
        return replace(self, installed=installed)

    def match(self, f: Finding) -> KnownDivergence | None:
        """The first entry whose patterns match ``f`` and whose ranges hold the installed versions."""
        for e in self.entries:
            if e.matches(f) and e.outside(f, self.installed) is None:
                return e
        return None

    def outside(self, f: Finding) -> str | None:
        """For a finding no entry explains: the first entry whose patterns match it but whose
        ranges leave out an installed version, and why (``"`id`: burn 0.23.0 is outside 0.22.1.."``)."""
        if self.match(f) is not None:
            return None
        for e in self.entries:
            why = e.outside(f, self.installed) if e.matches(f) else None
            if why is not None:
                return f"`{e.id}`: {why}"
        return None


class BaselineError(CaseError):
    """A malformed baseline file, or a ``--baseline`` path that cannot be read: one line naming
    the file and the field, exit status 2 (an ``InputError``). It is a ``CaseError`` as well,
    since callers caught that from ``load_baseline`` before this class existed."""


ALLOWED_FIELDS = (
    "id",
    "reason",
    "case",
    "upstream",
    "kind",
    "aspect",
    "frameworks",
    "method",
    "op",
    "sides",
    "role",
    "detail",
    "agrees",
    "versions",
)


def load_baseline(path: str | Path | None = None) -> Baseline:
    """The baseline at ``path`` (``None``: the bundled one). Raises ``BaselineError``, and only
    that, when the file is absent (a mistyped ``--baseline`` must not quietly mean "nothing is
    known"), unreadable (see ``case_values.read_toml``) or malformed."""
    path = BASELINE if path is None else Path(path)

    def err(where: str, message: str) -> BaselineError:
        return BaselineError(path, where, message)

    doc = cv.read_toml(path, lambda message: err("", message))
    entries = cv.guarded("", err, _entries, doc, err)
    ids = [e.id for e in entries]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise err("known", f"duplicate id(s): {', '.join(sorted(dup))}")
    return Baseline(entries, str(path))


def _entries(doc: dict[str, Any], err) -> list[KnownDivergence]:
    for key in doc:
        if key != "known":
            raise err(key, "unknown top-level field (allowed: known, as [[known]] tables)")
    known = doc.get("known", [])
    if not isinstance(known, list):
        raise err("known", f"expected an array of [[known]] tables, got {cv.brief(known)}")
    return [cv.guarded(f"known[{i}]", err, _entry, raw, f"known[{i}]", err) for i, raw in enumerate(known)]


def _entry(raw: Any, where: str, err) -> KnownDivergence:
    if not isinstance(raw, dict):
        raise err(where, f"expected a [[known]] table, got {cv.brief(raw)}")
    for key in raw:
        if key not in ALLOWED_FIELDS:
            raise err(f"{where}.{key}", f"unknown field (allowed: {', '.join(ALLOWED_FIELDS)})")
    for key in ("id", "reason", "case"):
        if key not in raw:
            raise err(f"{where}.{key}", "missing (a non-empty string)")
        if not isinstance(raw[key], str) or not raw[key]:
            raise err(f"{where}.{key}", f"expected a non-empty string, got {cv.brief(raw[key])}")
    if not isinstance(raw.get("upstream", ""), str):
        raise err(f"{where}.upstream", f"expected a string (a reference), got {cv.brief(raw['upstream'])}")
    fields: dict[str, Any] = dict(raw)
    for key in MATCH_FIELDS:
        value = raw.get(key, "*")
        if isinstance(value, list) and value and all(isinstance(x, str) for x in value):
            fields[key] = tuple(value)
        elif not isinstance(value, str):
            raise err(f"{where}.{key}", f"a shell-style pattern or a non-empty list of them, got {cv.brief(value)}")
    frameworks = raw.get("frameworks", [])
    # A string would be taken letter by letter; matches() compares one or two framework names.
    if not isinstance(frameworks, list) or len(frameworks) > 2 or not all(isinstance(x, str) and x for x in frameworks):
        raise err(f"{where}.frameworks", f"expected a list of one or two framework names, got {cv.brief(frameworks)}")
    fields["frameworks"] = tuple(frameworks)
    fields["versions"] = _versions(raw.get("versions", {}), f"{where}.versions", err)
    return KnownDivergence(**fields)


def _versions(raw: Any, where: str, err) -> tuple[tuple[str, VersionRange], ...]:
    if not isinstance(raw, dict):
        raise err(where, f'expected a table of framework = "A..B", got {cv.brief(raw)}')
    out = []
    for fw, spec in raw.items():
        if fw not in FRAMEWORKS:
            raise err(f"{where}.{fw}", f"unknown framework (known: {', '.join(FRAMEWORKS)})")
        if not isinstance(spec, str):
            raise err(f"{where}.{fw}", f'expected a version range like "0.9.1..0.11.1", got {cv.brief(spec)}')
        try:
            out.append((fw, VersionRange.parse(spec)))
        except ValueError as e:
            raise err(f"{where}.{fw}", str(e)) from None
    return tuple(out)
