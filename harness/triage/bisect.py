"""Bisection over published releases: which release of a framework introduced (or fixed) what a
case shows.

For each release the case's stand-alone reproducer is written with the framework's crates pinned
to exactly that release, built in a target directory of its own (cached: a second bisection over
the same release builds nothing), and run; its printed states become a trace, and the trace's
snapshot verdicts are compared with the reference framework's on the installed version. A release
the reproducer does not build against is reported as such (its first error line), never skipped
silently. Every release in the list is built (a linear scan, not a binary search: the table of
releases is the result a user files, and cached builds make a second scan cheap); the summary
names each release where the divergence appears or disappears.

``bisect`` takes the per-release observation as a function, so the logic is tested with a TEST
DOUBLE; ``cargo_observer`` is the real one.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness.case.ir import Program, shapes_before
from harness.errors import InputError
from harness.judging.verdicts import verdicts
from harness.targets.registry import RELEASE_PACKAGE, RUST_SCAFFOLDS
from harness.targets.reproducers import parse_output, write_rust_project
from harness.targets.trace import Observation, StepResult, Trace
from harness.versions import version_key

#: The crate a framework's releases are listed under, for the frameworks whose reproducer is a
#: cargo project (a release is pinned in its Cargo.toml).
RELEASE_CRATE = {fw: RELEASE_PACKAGE[fw] for fw in RUST_SCAFFOLDS}


class BisectError(InputError):
    """A bad version list, an unknown framework, or releases that cannot be listed: one line."""


@dataclass
class Observed:
    """What one release showed: ``status`` ``ok`` (``verdicts`` per snapshot; a reproducer that
    stopped at an op's error ran that far, and the op's snapshot reads ``error``, its message in
    ``message``), ``does not build``, or ``failed`` (it exited before printing any state), with a
    one-line message."""

    version: str
    status: str
    verdicts: dict[str, str] = field(default_factory=dict)
    build_s: float = 0.0
    message: str = ""
    #: What a checked reproducer (``reproducer_base.Check``) said: whether the finding's
    #: divergence shows; None when the reproducer was not checked (then ``verdicts`` decide).
    shows: bool | None = None


@dataclass
class Bisection:
    framework: str
    reference: dict[str, str]  # the reference framework's verdicts, per snapshot
    rows: list[Observed]

    def diverges(self, row: Observed) -> bool | None:
        """Whether the release's verdicts differ from the reference's (None: nothing observed)."""
        if row.status != "ok":
            return None
        if row.shows is not None:
            return row.shows
        return any(row.verdicts.get(n) != v for n, v in self.reference.items())

    def changes(self) -> list[tuple[str, str, bool]]:
        """(release before, release, diverges from it on) for each change between consecutive
        observed releases."""
        out, prev = [], None
        for row in self.rows:
            d = self.diverges(row)
            if d is None:
                continue
            if prev is not None and self.diverges(prev) != d:
                out.append((prev.version, row.version, d))
            prev = row
        return out

    def summary(self) -> str:
        observed = [r for r in self.rows if r.status == "ok"]
        if not observed:
            return "no release built and ran: nothing to compare"
        changes = self.changes()
        if not changes:
            state = "shows" if self.diverges(observed[0]) else "does not show"
            return f"the divergence {state} in every release observed ({observed[0].version} to {observed[-1].version})"
        return "; ".join(
            f"appears in {v} (absent in {before})" if d else f"disappears in {v} (shown in {before})"
            for before, v, d in changes
        )

    def table(self) -> str:
        if any(r.shows is not None for r in self.rows):
            return self._checked_table()
        names = list(self.reference)
        lines = [
            f"| {self.framework} | build | " + " | ".join(f"`{n}`" for n in names) + " | divergence |",
            "|---|---|" + "---|" * len(names) + "---|",
            "| reference | — | " + " | ".join(self.reference[n] for n in names) + " | — |",
        ]
        for r in self.rows:
            if r.status != "ok":
                lines.append(f"| {r.version} | {r.build_s:.0f}s | {r.status}: {r.message} |" + " |" * len(names))
                continue
            d = "yes" if self.diverges(r) else "no"
            said = f" ({r.message})" if r.message else ""
            lines.append(
                f"| {r.version} | {r.build_s:.0f}s | "
                + " | ".join(r.verdicts.get(n, "—") for n in names)
                + f" | {d}{said} |"
            )
        return "\n".join(lines)

    def _checked_table(self) -> str:
        """The table of a checked bisection: whether the divergence shows in each release, and the
        check's own line (or the failing call's error)."""
        lines = [f"| {self.framework} | build | divergence | what the reproducer said |", "|---|---|---|---|"]
        for r in self.rows:
            shown = r.status if r.status != "ok" else ("shows" if self.diverges(r) else "does not show")
            said = r.message.replace("|", "\\|")
            lines.append(f"| {r.version} | {r.build_s:.0f}s | {shown} | {said} |")
        return "\n".join(lines)


def bisect(
    framework: str,
    versions: Sequence[str],
    reference: Mapping[str, str],
    observe: Callable[[str], Observed],
    log: Callable[[str], None] = lambda s: None,
) -> Bisection:
    rows = []
    for v in versions:
        row = observe(v)
        log(f"{framework} {v}: {row.status} ({row.build_s:.0f}s build)" + (f": {row.message}" if row.message else ""))
        rows.append(row)
    return Bisection(framework, dict(reference), rows)


# ------------------------------------------------------------------------------------------------
# Releases.


#: The sparse index releases are listed from; ``ALIASFUZZ_CRATES_INDEX`` names a mirror.
CRATES_INDEX = "https://index.crates.io"
#: A release as ``--versions`` names it.
RELEASE_RE = re.compile(r"\d+\.\d+\.\d+")


def published(framework: str, index_url: str | None = None) -> list[str]:
    """The framework's releases on crates.io (its sparse index, or ``ALIASFUZZ_CRATES_INDEX``),
    pre-releases and yanked ones left out, oldest first."""
    crate = RELEASE_CRATE[framework]
    index_url = (index_url or os.environ.get("ALIASFUZZ_CRATES_INDEX") or CRATES_INDEX).rstrip("/")
    url = f"{index_url}/{crate[:2]}/{crate[2:4]}/{crate}"
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            lines = r.read().decode().splitlines()
        out = [d["vers"] for d in map(json.loads, lines) if not d.get("yanked") and "-" not in d["vers"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise BisectError(f"cannot list the releases of {crate} ({url}): {e}") from None
    return sorted(out, key=version_key)


def parse_versions(spec: str, releases: Callable[[], Sequence[str]]) -> list[str]:
    """``A..B`` (every release from A to B, both included, A not after B) or ``A,B,C`` (those, in
    that order). Every release named must be published (``releases``); what can be refused
    without the list of releases (a malformed or reversed range) is refused before asking for it."""
    if ".." in spec:
        lo, _, hi = (v.strip() for v in spec.partition(".."))
        if not RELEASE_RE.fullmatch(lo) or not RELEASE_RE.fullmatch(hi):
            raise BisectError(f"--versions {spec}: expected A..B with releases like 0.9.1")
        if version_key(lo) > version_key(hi):
            raise BisectError(f"--versions {spec}: the range is reversed ({lo} is after {hi}); give {hi}..{lo}")
        named, known = [lo, hi], list(releases())
        out = [v for v in known if version_key(lo) <= version_key(v) <= version_key(hi)]
    else:
        named = [v.strip() for v in spec.split(",") if v.strip()]
        if not named or any(not RELEASE_RE.fullmatch(v) for v in named):
            raise BisectError(f"--versions {spec}: expected A..B or a comma-separated list of releases like 0.9.1")
        known, out = list(releases()), named
    for v in named:
        if v not in known:
            raise BisectError(
                f"--versions {spec}: {v} is not a published release (known: {', '.join(known[-8:])}, ...)"
            )
    return out


def check_cache(cache: Path) -> Path:
    """``--cache``: a folder, made when missing; a one-line ``BisectError`` when it is a file or
    cannot be made."""
    if cache.exists() and not cache.is_dir():
        raise BisectError(f"--cache {cache}: not a folder")
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BisectError(f"--cache {cache}: cannot make the folder ({e.strerror or e})") from None
    return cache


# ------------------------------------------------------------------------------------------------
# The real observation: build and run the reproducer against one release.


def trace_of_output(program: Program, printed: Mapping, target: str, error: str | None = None) -> Trace:
    """A reproducer's printed states (``reproducers.parse_output``) as a trace of ``program``:
    an op with no printed state failed (the first one with ``error``, the reproducer's own
    message, when given), a printed word (``uninitialized``) is no value."""

    def obs(name: str, raw, shape_map) -> Observation:
        shape = tuple(shape_map.get(name, ()))
        value = None if isinstance(raw, str) else np.array(raw, dtype=np.float32)
        if value is not None and shape and value.size == int(np.prod(shape)):
            value = value.reshape(shape)
        return Observation(value.shape if value is not None else shape, value, "", None, None, value is not None)

    initial = {n: obs(n, v, shapes_before(program, 0)) for n, v in (printed.get(None) or {}).items()}
    steps, previous = [], dict(printed.get(None) or {})
    for i in range(len(program.ops)):
        state = printed.get(i)
        if state is None:
            steps.append(StepResult("error", error or "the reproducer printed nothing after this op", {}))
            error = None
            continue
        after = shapes_before(program, i + 1)
        changed = {n: obs(n, v, after) for n, v in state.items() if previous.get(n) != v}
        steps.append(StepResult("ok", None, changed))
        previous = dict(state)
    return Trace(target, "ok", None, initial, steps)


def error_line(stderr: str, status: int) -> str:
    """What a reproducer that exited with ``status`` said: the ``Error: ...`` line Rust prints for
    an error returned from ``main`` (a backtrace follows it under RUST_BACKTRACE), else its first
    line, else the status."""
    lines = [x.strip() for x in stderr.splitlines() if x.strip()]
    said = next((x[len("Error:") :].strip() for x in lines if x.startswith("Error:")), None)
    return said or (lines[0] if lines else f"exit status {status}")


def verdict_words(program: Program, trace: Trace) -> dict[str, str]:
    return {n: v.summary for n, v in verdicts(program, trace).items()}


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "aliasfuzz" / "bisect"


def cargo_observer(
    program: Program, framework: str, cache: Path, timeout_s: float = 3600, check=None
) -> Callable[[str], Observed]:
    """Builds and runs ``program``'s reproducer against one release, in ``cache/<fw>-<release>``.
    With a ``check``, the reproducer says whether the finding's divergence shows, and that decides
    the row."""

    def observe(version: str) -> Observed:
        dest = cache / f"{framework}-{version}"
        pkg = f"bisect_{framework}"
        write_rust_project(dest, pkg, framework, program, check, version=version)
        env = {**os.environ, "CARGO_TARGET_DIR": str(dest / "target")}
        start = time.monotonic()
        b = subprocess.run(
            ["cargo", "build", "-q"], cwd=dest, env=env, capture_output=True, text=True, timeout=timeout_s
        )
        build_s = time.monotonic() - start
        if b.returncode != 0:
            first = next((line for line in b.stderr.splitlines() if line.startswith("error")), b.stderr.strip()[:200])
            return Observed(
                version,
                "does not build",
                build_s=build_s,
                message=f"this reproducer does not build against {framework} {version}: {first}",
            )
        r = subprocess.run([str(dest / "target" / "debug" / pkg)], capture_output=True, text=True, timeout=600)
        said = r.stdout.splitlines()
        if check is not None and ("the divergence shows" in said or "the divergence does not show" in said):
            shows = "the divergence shows" in said
            note = next((x for x in said if x.startswith(("check: ", f"op {check.op}: error: "))), "")
            return Observed(version, "ok", {}, build_s, message=note, shows=shows)
        printed = parse_output(r.stdout)
        if r.returncode != 0 and not printed:
            return Observed(version, "failed", build_s=build_s, message=error_line(r.stderr, r.returncode))
        # Exited early: it ran up to the op whose call returned an error (main's `?`), the
        # divergence of an `error` finding; the op's snapshot reads `error`.
        error = error_line(r.stderr, r.returncode) if r.returncode != 0 else None
        trace = trace_of_output(program, printed, f"{framework}:{version}", error)
        return Observed(version, "ok", verdict_words(program, trace), build_s, message=error or "")

    return observe
