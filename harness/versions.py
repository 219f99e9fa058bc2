"""Framework versions: their order, and the ranges a baseline entry or a bisection names.

A range is ``A..B`` (A to B, both included), ``A..`` (A and every later release), ``..B`` (up to B)
or one version ``A`` (that one only): the syntax of ``aliasfuzz bisect --versions``. Versions
compare by their numeric release parts (``2.5.1+cpu`` is 2.5.1: a local build tag says nothing of
the code); a pre-release (``0.10.0-alpha.2``, ``2.6.0rc1``) comes before its release.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_RELEASE = re.compile(r"\d+(?:\.\d+)*")


def version_key(version: str) -> tuple:
    """A sort key: release parts padded to three, then 1 for a release or 0 for a pre-release,
    then the pre-release's numbers."""
    v = version.strip().split("+", 1)[0]
    m = _RELEASE.match(v)
    if m is None:
        raise ValueError(f"{version!r} is not a version (expected digits and dots, like 0.11.1)")
    release = tuple(int(x) for x in m.group().split("."))
    rest = v[m.end() :]
    pre = tuple(int(x) for x in re.findall(r"\d+", rest))
    return release + (0,) * (3 - len(release)), 0 if rest else 1, pre


@dataclass(frozen=True)
class VersionRange:
    """The versions from ``low`` to ``high``, both included; None: open on that side."""

    low: str | None
    high: str | None

    @classmethod
    def parse(cls, spec: str) -> VersionRange:
        """Raises ``ValueError`` with the reason for a spec that is not a range."""
        s = spec.strip()
        lo, sep, hi = s.partition("..")
        lo, hi = lo.strip() or None, hi.strip() or None
        if not sep:
            hi = lo
        if lo is None and hi is None:
            raise ValueError(f"{spec!r} names no version (expected A..B, A.., ..B or A)")
        for v in (lo, hi):
            if v is not None:
                version_key(v)
        if lo is not None and hi is not None and version_key(lo) > version_key(hi):
            raise ValueError(f"{spec!r}: {lo} comes after {hi}")
        return cls(lo, hi)

    def __contains__(self, version: str) -> bool:
        k = version_key(version)
        return (self.low is None or version_key(self.low) <= k) and (self.high is None or k <= version_key(self.high))

    def __str__(self) -> str:
        if self.low == self.high:
            return str(self.low)
        return f"{self.low or ''}..{self.high or ''}"
