"""Stand-alone reproducers for a finding, written next to its case file.

- ``<stem>.torch.py``: a PyTorch script (always): the torch target's transcript of the case
  (``harness/targets/torch/reproducer.py``);
- ``<stem>-candle/`` (Cargo.toml, src/main.rs) when a candle target is part of the finding;
- ``<stem>-burn/`` likewise for burn.

Each replays the minimized program with the framework's own API (no aliasfuzz dependency), on
the CPU, and prints every bound name after every op:

    initial: p0 = [1.0, 2.0]
    after op 0: s0 = [1.0, 2.0]

(values row-major; ``uninitialized`` for a lazy param not yet created). The torch script and the
candle and burn projects are the calls the target made, as it ran them (its transcript); an op
the framework reported ``unsupported`` or skipped is a comment.

This module only dispatches: each framework's reproducer lives beside its target
(``harness/targets/<framework>/reproducer.py``; the Rust transcripts are wrapped by
``harness/targets/rust_reproducer.py``), and the cargo project of the Rust ones is
``harness/targets/rust_project.py``'s: a Cargo.toml with the exact versions and ``src/main.rs``.

The Rust projects depend on their framework's crates only, pinned as in the probes, and use the
probes' profile. Sharing the probes' ``CARGO_TARGET_DIR`` (with their Cargo.lock copied in,
``prepare_cargo_build``) does not by itself avoid rebuilding candle or burn: cargo unifies features
over everything one build resolves, and the probe workspace builds candle_probe, burn_probe and
their serde/serde_json/strum/tempfile together, so a one-framework project enables other features on
shared crates (serde, half, rand, ...) and every crate above them gets a new hash. The test
suite's builds therefore use ``write_project(..., unify_with_probes=True)``: the generated
Cargo.toml then lists exactly the probe workspace's dependency set, so the resolved features, and
so the compiled artifacts, are the workspace's own and only the reproducer crate is compiled.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

from harness.case.case_file import load_case
from harness.case.ir import Program
from harness.paths import PROBES_WORKSPACE
from harness.targets.registry import RUST_SCAFFOLDS
from harness.targets.reproducer_base import Check
from harness.targets.rust_project import write_cargo_project
from harness.targets.rust_reproducer import rust_main
from harness.targets.rust_reproducer import transcribe as rust_transcribe
from harness.targets.torch import FRAMEWORK as TORCH
from harness.targets.torch.reproducer import torch_script, variant_of
from harness.targets.torch.reproducer import transcribe as torch_transcribe
from harness.targets.torch.session import DEVICES

__all__ = [
    "Check",
    "parse_output",
    "prepare_cargo_build",
    "torch_script",
    "trace_states",
    "transcribe",
    "write_project",
    "write_reproducers",
    "write_rust_project",
]

LINE_RE = re.compile(r"^(initial|after op (\d+)): (\S+) = (.*)$")


def transcribe(framework: str, program: Program) -> dict | None:
    """``framework``'s trace of ``program`` on its CPU with the transcript of its calls (PROTOCOL.md),
    or None where its reproducer is not a transcript."""
    if framework == TORCH:
        return torch_transcribe(program)
    scaffold = RUST_SCAFFOLDS.get(framework)
    return rust_transcribe(scaffold, program) if scaffold is not None else None


def write_rust_project(
    dest: Path,
    package: str,
    framework: str,
    program: Program,
    check: Check | None = None,
    unify_with_probes: bool = False,
    version: str | None = None,
) -> Path:
    """The cargo reproducer of ``program`` for the Rust framework ``framework`` at ``dest``: its
    probe's transcript wrapped in a ``main`` (``check``: exit 1 when the divergence shows), and a
    Cargo.toml with the framework's crates (at ``version`` when given, for a bisection)."""
    scaffold = RUST_SCAFFOLDS[framework]
    main_rs = rust_main(scaffold, program, check)
    return write_cargo_project(dest, package, framework, scaffold.crates, main_rs, unify_with_probes, version)


def _frameworks(finding: dict) -> set[str]:
    return {t.split(":", 1)[0] for t in finding.get("targets", [])}


def write_reproducers(
    run_dir: str | Path, finding: dict, check: Check | None = None, checked: str | None = None
) -> list[Path]:
    """Writes the reproducers of one finding (a findings.json record) next to its case; returns
    their paths (the script, and each cargo project's folder). ``check`` goes into the reproducer
    of the framework ``checked``, which then exits 1 when the divergence shows. A finding between
    two torch variants (``torch:cpu`` against ``torch:cpu+foreach``) gets a script that runs the
    program with each implementation and compares them."""
    run_dir = Path(run_dir)
    case_path = run_dir / finding["case"]
    program = load_case(case_path)
    stem = case_path.name[: -len(".toml")]
    out: list[Path] = []
    script = case_path.with_name(f"{stem}.torch.py")
    targets = list(finding.get("targets") or [])
    variants = None
    if (
        len(targets) == 2
        and all(t.startswith("torch:") for t in targets)
        and targets[0] != targets[1]
        and {t.split("+", 1)[0] for t in targets} == {targets[0].split("+", 1)[0]}
    ):
        variants = (variant_of(targets[0]), variant_of(targets[1]))
    # a finding of one torch target against itself: the script is that target's transcript
    device = (
        targets[0].split(":", 1)[1] if len(targets) == 2 and targets[0] == targets[1] and variants is None else "cpu"
    )
    script.write_text(
        torch_script(program, check if checked == TORCH else None, variants, device if device in DEVICES else "cpu"),
        encoding="utf-8",
    )
    out.append(script)
    fws = _frameworks(finding)
    for fw in RUST_SCAFFOLDS:
        if fw in fws:
            pkg = re.sub(r"[^a-z0-9_]", "_", f"repro_{stem}_{fw}".lower())
            dest = case_path.with_name(f"{stem}-{fw}")
            out.append(write_rust_project(dest, pkg, fw, program, check if checked == fw else None))
    return out


def write_project(
    program: Program, framework: str, dest: Path, unify_with_probes: bool = False, check: Check | None = None
) -> Path:
    """One cargo project for the Rust framework ``framework`` at ``dest`` (used by the tests).
    ``unify_with_probes``: depend on the whole probe workspace's dependency set, so that a build
    sharing the probes' CARGO_TARGET_DIR compiles only this crate (see the module docstring)."""
    return write_rust_project(dest, f"repro_{framework}", framework, program, check, unify_with_probes)


def prepare_cargo_build(project: Path) -> None:
    """Copies the probes' Cargo.lock in, so the same dependency versions resolve (and, with the
    probes' CARGO_TARGET_DIR, nothing already compiled is rebuilt)."""
    lock = PROBES_WORKSPACE / "Cargo.lock"
    if lock.exists():
        shutil.copyfile(lock, project / "Cargo.lock")


def parse_output(text: str, prefix: str = "") -> dict[int | None, dict[str, list[float] | str]]:
    """Reproducer output -> {op index (None: initial): {name: flat values or a word}}. ``prefix``
    ``"without: "`` reads a metamorphic case's second run instead (its ops numbered as the case's)."""
    out: dict[int | None, dict[str, Any]] = {}
    for line in text.splitlines():
        line = line.strip()
        if prefix:
            if not line.startswith(prefix):
                continue
            line = line[len(prefix) :]
        m = LINE_RE.match(line)
        if not m:
            continue
        step = None if m.group(1) == "initial" else int(m.group(2))
        raw = m.group(4).strip()
        if raw.startswith("["):
            vals = [
                float(x)
                for x in re.findall(r"[-+]?(?:inf|nan|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)", raw[1:-1], re.IGNORECASE)
            ]
            out.setdefault(step, {})[m.group(3)] = vals
        else:
            out.setdefault(step, {})[m.group(3)] = raw.split()[0]
    return out


def trace_states(target_json: dict) -> dict[int | None, dict[str, list[float] | str]]:
    """A target's repro JSON (``initial`` + per-op ``changed``) -> the full state after each op,
    in ``parse_output``'s form."""

    def val(o: dict) -> Any:
        if not o.get("initialized", True):
            return "uninitialized"
        if o.get("value") is None:
            return "unreadable"
        flat: list[float] = []

        def walk(x: Any) -> None:
            if isinstance(x, list):
                for y in x:
                    walk(y)
            else:
                flat.append(float(x))

        walk(o["value"])
        return flat

    state = {n: val(o) for n, o in (target_json.get("initial") or {}).items()}
    out: dict[int | None, dict[str, Any]] = {None: dict(state)}
    for i, step in enumerate(target_json.get("trace") or []):
        for n, o in (step.get("changed") or {}).items():
            state[n] = val(o)
        out[i] = dict(state)
    return out
