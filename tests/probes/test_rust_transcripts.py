"""Every case in tests/cases/ as a Rust probe's reproducer: each case's ``main.rs`` is built, run,
and its printed observations compared with the probe's own trace of the same case. A reproducer
is its probe's transcript of the case, and a floor on how many cases have one (a probe that has
not spelled some call of a case gives none) keeps that share from shrinking unnoticed.

The reproducers are built as modules of one binary, which runs the case its argument names:
one crate and one link instead of one per case. Linking a binary per case against burn's full
dependency graph (wgpu included) cost over 15 minutes on two cores; one binary costs well under
one. A module is the user's ``main.rs`` with ``pub`` before ``fn main``, so what compiles here
without a warning compiles so on its own.

The comparison is exact to 1e-5 for every name after every op the probe ran. Where the probe
cannot repeat its own values (a uniform tensor on a device that cannot be seeded: candle's CPU),
two runs of the probe differ too, and only the names and their sizes are compared.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.case.case_file import load_case
from harness.paths import cargo_target_dir, probe_binary
from harness.targets.burn.reproducer import SCAFFOLD as BURN
from harness.targets.candle.reproducer import SCAFFOLD as CANDLE
from harness.targets.reproducer_base import without_run
from harness.targets.reproducers import parse_output, prepare_cargo_build
from harness.targets.rust_project import cargo_toml
from harness.targets.rust_reproducer import Scaffold, rust_main, transcribe, transcribed
from tests.conftest import CASES, need

ALL_CASES = sorted(CASES.glob("*.toml"))
SCAFFOLDS = {"candle": CANDLE, "burn": BURN}
#: The cases whose reproducer is the probe's transcript, at least. candle runs every case but two
#: whose program_rng its CPU cannot seed (the probe refuses them: no calls, no transcript); burn
#: runs and spells every case.
TRANSCRIBED_AT_LEAST = {"candle": 126, "burn": 128}


def _states(trace: dict, numbers: list[int]) -> dict[int | None, dict[str, object]]:
    """A probe trace (``initial`` + each step's ``changed``) -> the full state after each op the
    probe ran, by the case's op number (``parse_output``'s form: values, or a word)."""

    def value(obs: list) -> object:
        if not obs[5]:
            return "uninitialized"
        return "unreadable" if obs[1] is None else [float(x) for x in obs[1]]

    state = {n: value(o) for n, o in trace["initial"].items()}
    out: dict[int | None, dict[str, object]] = {None: dict(state)}
    for k, step in enumerate(trace["steps"]):
        for n, o in step["changed"].items():
            state[n] = value(o)
        if step["status"] == "ok":
            out[numbers[k]] = dict(state)
    return out


def _differences(printed: dict, trace: dict, numbers: list[int], exact: bool) -> list[str]:
    """What the reproducer printed against what the probe observed (``exact``: the values too,
    else their sizes)."""
    out = []
    for step, names in _states(trace, numbers).items():
        got = printed.get(step, {})
        for name, want in names.items():
            have = got.get(name)
            where = "initial" if step is None else f"after op {step}"
            if have is None:
                out.append(f"{where}: {name} not printed")
            elif isinstance(want, str) or isinstance(have, str):
                if have != want:
                    out.append(f"{where}: {name} printed {have}, observed {want}")
            elif len(have) != len(want) or (
                exact
                and any(not (a != a and b != b) and abs(a - b) > 1e-5 * max(1.0, abs(b)) for a, b in zip(have, want))
            ):
                out.append(f"{where}: {name} printed {have}, observed {want}")
    return out


#: A compiler error in ``cargo build --message-format=short`` (``path:line:col: error[E0425]: ...``).
_ERROR = re.compile(r": error(\[|:)")


def _module_name(index: int) -> str:
    return f"case{index:03d}"


def _dispatcher(modules: list[str]) -> str:
    """The binary's ``main.rs``: each reproducer a module, run by its name as the argument, and
    its ``main``'s result reported as a binary's own would be (``Termination``)."""
    return "\n".join(
        [
            *(f'#[path = "{m}/main.rs"]\nmod {m};' for m in modules),
            "",
            "fn report<T: std::process::Termination>(result: T) -> std::process::ExitCode {",
            "    result.report()",
            "}",
            "",
            "fn main() -> std::process::ExitCode {",
            "    match std::env::args().nth(1).as_deref() {",
            *(f'        Some("{m}") => report({m}::main()),' for m in modules),
            '        other => panic!("no reproducer named {other:?}"),',
            "    }",
            "}",
            "",
        ]
    )


class _Built:
    """One framework's reproducers of every case, built: the cases in the binary (by module), the
    cases that have a transcript, and the build's diagnostics. A case whose module does not compile is
    left out of a second build, so that the others still run."""

    def __init__(self, scaffold: Scaffold, root: Path):
        self.scaffold, self.modules, self.errors = scaffold, {}, {}
        self.transcribed: set[str] = set()
        package = f"transcripts_{scaffold.framework}"
        (root / "src").mkdir(parents=True)
        (root / "Cargo.toml").write_text(cargo_toml(package, scaffold.framework, scaffold.crates, True))
        prepare_cargo_build(root)
        for i, case in enumerate(ALL_CASES):
            program = load_case(case)
            try:
                if transcribed(scaffold, program):
                    self.transcribed.add(case.name)
                text = rust_main(scaffold, program)
            except Exception as e:  # reported by the case's own test
                self.errors[case.name] = f"{type(e).__name__}: {e}"
                continue
            folder = root / "src" / _module_name(i)
            folder.mkdir()
            module_text, made_public = re.subn(r"^fn main\(", "pub fn main(", text, count=1, flags=re.M)
            if not made_public:
                self.errors[case.name] = "the reproducer has no `fn main(`"
                continue
            (folder / "main.rs").write_text(module_text, encoding="utf-8")
            self.modules[case.name] = _module_name(i)
        self.binary = cargo_target_dir() / "debug" / package
        self.diagnostics = self._build(root)
        # An error stops the crate's build before its lints: the rest are built again without
        # the failing cases, for their warnings and their binary.
        failing = {
            case: module
            for case, module in self.modules.items()
            if any(f"src/{module}/" in line and _ERROR.search(line) for line in self.diagnostics)
        }
        if failing:
            for case in failing:
                del self.modules[case]
            self.diagnostics += self._build(root)
        self.not_compiling = {  # the cases with a diagnostic (an error or a warning)
            case
            for case, module in {**self.modules, **failing}.items()
            if any(f"src/{module}/" in line for line in self.diagnostics)
        }

    def _build(self, root: Path) -> list[str]:
        """Builds the binary of the cases in ``self.modules`` and returns the build's diagnostics;
        a binary a failed build leaves in the shared target directory would be an earlier one's."""
        self.binary.unlink(missing_ok=True)
        (root / "src" / "main.rs").write_text(_dispatcher(sorted(self.modules.values())))
        done = subprocess.run(
            ["cargo", "build", "--message-format=short"],
            cwd=root,
            env={**os.environ, "CARGO_TARGET_DIR": str(cargo_target_dir())},
            capture_output=True,
            text=True,
            timeout=1800,
        )
        return [line for line in done.stderr.splitlines() if "warning" in line or "error" in line]


@pytest.fixture(scope="module", params=sorted(SCAFFOLDS))
def built(request, tmp_path_factory) -> _Built:
    scaffold = SCAFFOLDS[request.param]
    if not probe_binary(scaffold.probe).exists():
        need(f"the {scaffold.framework} probe", "build the probes with `make probes`")
    if shutil.which("cargo") is None:
        need("cargo", "install Rust from https://rustup.rs")
    return _Built(scaffold, tmp_path_factory.mktemp(f"transcripts-{scaffold.framework}"))


def test_every_reproducer_compiles_without_a_warning(built):
    assert not built.errors, built.errors
    assert not built.not_compiling, "\n".join(built.diagnostics[:40])


def test_the_transcribed_share_does_not_shrink(built):
    floor = TRANSCRIBED_AT_LEAST[built.scaffold.framework]
    assert len(built.transcribed) >= floor, sorted(c.name for c in ALL_CASES if c.name not in built.transcribed)


@pytest.mark.parametrize("case", ALL_CASES, ids=[c.stem for c in ALL_CASES])
def test_a_reproducer_prints_what_its_probe_observed(built, case):
    assert case.name not in built.errors, built.errors.get(case.name)
    assert case.name in built.modules, f"{case.name}: not built:\n" + "\n".join(built.diagnostics[:20])
    assert built.binary.exists(), "the reproducers' binary was not built:\n" + "\n".join(built.diagnostics[:20])
    ran = subprocess.run(
        [str(built.binary), built.modules[case.name]],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "RUST_BACKTRACE": "0"},
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    program = load_case(case)
    runs = [(program, "", list(range(len(program.ops))))]
    second = without_run(program, None)
    if second is not None:
        runs.append((second.program, second.prefix, list(second.numbers)))
    for run_program, prefix, numbers in runs:
        trace = transcribe(built.scaffold, run_program)
        if trace["status"] != "ok":
            # Nothing ran: the reproducer prints nothing for the run.
            assert not parse_output(ran.stdout, prefix)
            continue
        repeat = transcribe(built.scaffold, run_program)
        exact = _states(trace, numbers) == _states(repeat, numbers)
        printed = parse_output(ran.stdout, prefix)
        assert None in printed, f"{prefix}no initial line:\n{ran.stdout[:2000]}"
        diff = _differences(printed, trace, numbers, exact)
        assert not diff, f"{built.scaffold.framework} reproducer of {case.name}:\n" + "\n".join(diff[:10])
