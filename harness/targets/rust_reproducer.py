"""The reproducer of a case on a Rust probe: the probe's transcript of the case, wrapped in the
smallest ``main`` that prints what the case observes.

A probe spells each framework call once and records it as it runs it, with the case's names as
variables (``rust_probes/protocol/src/transcript.rs``). This module asks the probe for that
transcript (a ``run`` request with ``"transcript": true``, PROTOCOL.md, on the CPU) and writes
``src/main.rs`` around it: the framework's ``use`` lines and print helper (a ``Scaffold``), the
transcript's prologue, each op's lines followed by a ``show`` of every bound name (``after op 0:
s = [1.0, 2.0]``, the lines the test suite compares with the probe's trace), and, given a
``Check``, the comparison that says whether the finding's divergence shows (exit 1 when it does).

An op the probe reported an error for is made as it was: its lines up to the failed call run as
they are, the failed call runs in a closure (``Result`` frameworks) or under ``catch_unwind``
(frameworks that panic), and its error is printed; the lines the transcript gives after the
failure follow (what the probe keeps of a value the call consumed: a name it reads as lost, a
model's slot it keeps). An op the framework does not support, or that
was skipped, is a comment. A metamorphic case is two runs in two blocks, the second without the
case's inert ops (``without: ...`` lines).

The prologue's set-up lines that only fill a variable no other line reads (the model map of a
program that never steps, the gradients of a program that never trains) are left out: they
change nothing a case observes, and the reproducer reads as the calls it makes.

Text from the case (its title, messages) is written only as comments or string literals
(``harness.escaping``); names are variables through the probe's own mapping.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass

from harness.case.ir import Program
from harness.escaping import rust_comment, rust_str, visible
from harness.paths import probe_binary
from harness.targets.base import SetupError
from harness.targets.protocol import PROTOCOL_VERSION
from harness.targets.reproducer_base import Check, without_run
from harness.targets.rust_project import CHECK_VALUES


@dataclass(frozen=True)
class Scaffold:
    """What a framework's reproducer has around its transcript."""

    framework: str
    #: The probe binary that transcribes a case.
    probe: str
    #: The crates a reproducer depends on (their versions and features are the probe's); everything
    #: else the probe depends on is the harness's, not the user's.
    crates: tuple[str, ...]
    #: The ``use`` lines of ``main.rs``.
    uses: tuple[str, ...]
    #: ``fn values(..) -> Vec<f32>`` (what ``show`` prints and a check compares) and
    #: ``fn show(label: &str, name: &str, t: ..)``, taking ``&variable``.
    helpers: tuple[str, ...]
    #: ``main``'s return type, and how a failed call is caught: ``"result"`` (a closure
    #: returning ``main``'s type) or ``"panic"`` (``catch_unwind``).
    result: str
    errors: str
    #: Prologue set-up: a variable, and the pattern of the lines that only fill it; both go
    #: where no other line reads the variable.
    set_up: tuple[tuple[str, str], ...] = ()
    #: A ``let`` line whose variable (the group ``var``) no other line reads goes too.
    unread_lets: str = ""
    #: A variable's values as a ``Vec<f32>`` (for a check), ``{var}`` the variable.
    values_of: str = "values(&{var})"
    #: The CPU device the probe transcribes a case on.
    device: str = "cpu"

    @property
    def cpu_target(self) -> str:
        """The target id of that device (what a bisection runs the installed release on)."""
        return f"{self.framework}:{self.device}"


def transcribe(scaffold: Scaffold, program: Program, device: str | None = None) -> dict:
    """The probe's trace of ``program`` on ``device`` (the scaffold's CPU device), with its
    transcript (PROTOCOL.md)."""
    device = device or scaffold.device
    binary = probe_binary(scaffold.probe)
    if not binary.exists():
        raise SetupError(f"{binary}: the {scaffold.framework} probe is not built (run `make probes`)")
    requests = [
        {"type": "hello", "protocol": PROTOCOL_VERSION},
        {"type": "run", "id": 0, "device": device, "program": program.to_wire(), "transcript": True},
        {"type": "exit"},
    ]
    done = subprocess.run(
        [str(binary)],
        input="".join(json.dumps(r) + "\n" for r in requests),
        capture_output=True,
        text=True,
        timeout=600,
    )
    for line in done.stdout.splitlines():
        reply = json.loads(line)
        if reply.get("type") == "trace":
            return reply
        if reply.get("type") == "error":
            raise SetupError(f"{binary}: {reply.get('message')}")
    raise SetupError(f"{binary}: no trace in its reply (exit status {done.returncode}): {done.stderr[-300:]}")


def _comments(text: str) -> list[str]:
    return [line for line in rust_comment(text, "//") if line.strip() != "//"]


class _Run:
    """One run of a transcript as ``main``'s lines: ``prefix`` labels its printed lines,
    ``numbers`` are the case's numbers of its ops."""

    def __init__(
        self,
        scaffold: Scaffold,
        trace: dict,
        program: Program,
        prefix: str = "",
        numbers=None,
        check: Check | None = None,
    ):
        self.scaffold, self.trace, self.program, self.prefix, self.check = scaffold, trace, program, prefix, check
        self.numbers = list(numbers) if numbers is not None else list(range(len(program.ops)))
        self.transcript = trace.get("transcript") or {"prologue": [], "ops": [], "names": {}}
        self.variables = self.transcript["names"]
        self.bound = list(trace.get("initial") or {})

    def show(self, label: str) -> list[str]:
        return [
            f"show({rust_str(self.prefix + label)}, {rust_str(n)}, &{self.variables[n]});"
            for n in self.bound
            if n in self.variables
        ]

    def failed(self, label: str, lines: list[str], after: list[str]) -> list[str]:
        """The op's lines, its last (the call that failed) caught and its error printed, then
        ``after``: what the probe keeps of the values the call consumed (the transcript's
        ``after_failure`` lines of the op)."""
        c = self.check
        shows = " divergence = true;" if c is not None and c.want is None and label == c.label() else ""
        *before, last = lines
        if self.scaffold.errors == "panic":
            return [
                *before,
                "let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {",
                last,
                "}));",
                "if let Err(payload) = failed {",
                "let message = payload.downcast_ref::<String>().cloned()"
                ".or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default();",
                f'println!("{self.prefix}{label}: error: {{message}}");{shows}',
                "}",
                *after,
            ]
        return [
            *before,
            f"let failed = (|| -> {self.scaffold.result} {{",
            last,
            "Ok(())",
            "})();",
            f'if let Err(e) = failed {{ println!("{self.prefix}{label}: error: {{e}}");{shows} }}',
            *after,
        ]

    def lines(self) -> list[str]:
        if self.trace.get("status") != "ok":
            return _comments(
                f"{self.scaffold.framework} did not run the case: {self.trace.get('status')}: "
                f"{self.trace.get('message') or ''}"
            )
        if self.trace.get("transcript") is None:
            return _comments(
                f"the {self.scaffold.framework} probe has not spelled every call of this case: it gave no "
                "transcript, so there is no reproducer to write"
            )
        out = [*self.transcript["prologue"], *self.show("initial")]
        for k, step in enumerate(self.trace.get("steps") or []):
            i = self.numbers[k]
            lines = self.transcript["ops"][k] if k < len(self.transcript["ops"]) else []
            op = self.program.ops[k]
            for n in step.get("changed") or {}:
                if n not in self.bound:
                    self.bound.append(n)
            status = step.get("status", "ok")
            out.append("")
            out += _comments(f"op {i}: {visible(op.kind)}")
            if status == "ok":
                out += lines
            elif status == "error" and lines:
                after = (self.transcript.get("after_failure") or {}).get(str(k), [])
                out += self.failed(f"op {i}", lines, after)
                continue
            else:
                out += _comments(
                    f"not run: {self.scaffold.framework} reported `{visible(status)}`: {step.get('message') or ''}"
                )
                continue
            out += self.show(f"after op {i}")
            c = self.check
            if c is not None and c.want is not None and c.subject in self.variables and c.label() == f"after op {i}":
                want = "[" + ", ".join(_f32(x) for x in c.want) + "]"
                got = self.scaffold.values_of.format(var=self.variables[c.subject])
                out.append(f"divergence |= check_values({rust_str(c.subject)}, &{got}, &{want}, {rust_str(c.source)});")
        return out


def _f32(x: float) -> str:
    x = float(x)
    if x != x:
        return "f32::NAN"
    if x in (float("inf"), float("-inf")):
        return "f32::INFINITY" if x > 0 else "f32::NEG_INFINITY"
    return f"{x!r}f32"


def _without_unread_set_up(scaffold: Scaffold, body: list[str]) -> list[str]:
    """``body`` without the set-up lines of a variable no other line reads."""
    for variable, filling in scaffold.set_up:
        word = re.compile(rf"\b{re.escape(variable)}\b")
        own = [line for line in body if re.match(filling, line)]
        if not any(word.search(line) for line in body if line not in own):
            body = [line for line in body if line not in own]
    if scaffold.unread_lets:
        lets = {line: m.group("var") for line in body if (m := re.match(scaffold.unread_lets, line))}
        body = [
            line
            for line in body
            if line not in lets or any(re.search(rf"\b{lets[line]}\b", other) for other in body if other != line)
        ]
    return body


def _indent(lines: list[str], depth: int) -> list[str]:
    """``lines`` indented ``depth`` levels, a line's own nesting (``{`` / ``}``) followed."""
    out, level = [], depth
    for line in lines:
        if not line:
            out.append("")
            continue
        if line.startswith("}"):
            level -= 1
        out.append("    " * level + line)
        if line.endswith("{"):
            level += 1
    return out


def _cleaned_up(lines: list[str]) -> list[str]:
    """``lines`` and then the removal of each file they write in the temporary directory (a
    replayed case leaves nothing behind)."""
    files = [m.group(1) for line in lines if (m := _TEMP_FILE.match(line))]
    return [*lines, *(f"let _ = std::fs::remove_file(&{v});" for v in dict.fromkeys(files))]


#: A transcript line that names a file in the temporary directory.
_TEMP_FILE = re.compile(r"let (\w+) = std::env::temp_dir\(\)\.join\(")


def transcribed(scaffold: Scaffold, program: Program) -> bool:
    """Whether the probe keeps a transcript of every call ``program`` makes (of both runs of a
    metamorphic case): a probe that has not spelled some call yet gives none."""
    second = without_run(program, None)
    runs = [program] if second is None else [program, second.program]
    return all(transcribe(scaffold, p).get("transcript") is not None for p in runs)


def rust_main(scaffold: Scaffold, program: Program, check: Check | None = None) -> str:
    """``src/main.rs`` of ``program``'s reproducer: its transcript on the probe's CPU, wrapped.
    ``check``: what says whether the finding's divergence shows; ``main`` then ends by saying
    so, and exits 1 when it does."""
    first = _cleaned_up(
        _without_unread_set_up(scaffold, _Run(scaffold, transcribe(scaffold, program), program, check=check).lines())
    )
    second = without_run(program, None)
    if second is None:
        body = first
    else:
        group = list(program.inert)
        rest = _Run(
            scaffold, transcribe(scaffold, second.program), second.program, second.prefix, second.numbers
        ).lines()
        body = [
            f"// A metamorphic case: the program with its inert ops {group}, then without them.",
            "{",
            *first,
            "}",
            f'println!("== without the inert ops {group} ==");',
            "{",
            *_cleaned_up(_without_unread_set_up(scaffold, rest)),
            "}",
        ]
    if check is not None:
        body = [
            "let mut divergence = false;  // set where the finding's divergence shows",
            *body,
            "",
            "if divergence {",
            'println!("the divergence shows");',
            "std::process::exit(1);",
            "}",
            'println!("the divergence does not show");',
        ]
    title = program.title or "case"
    head = [
        *rust_comment(f"aliasfuzz reproducer ({scaffold.framework}, CPU): {title}", "//!"),
        f"//! The {scaffold.framework} probe's transcript of the case: the calls it made, in order, with the",
        "//! case's names as variables. Prints every bound name after every op.",
        "#![allow(unused_variables, unused_mut, unused_imports, dead_code, non_snake_case, clippy::all)]",
        "",
        *scaffold.uses,
        "",
        *scaffold.helpers,
        "",
    ]
    main = [f"fn main() -> {scaffold.result} {{", *_indent([*body, "Ok(())"], 1), "}"]
    checks = CHECK_VALUES if check is not None and check.want is not None else []
    return _formatted("\n".join([*head, *main, *checks, ""]))


def _formatted(source: str) -> str:
    """``source`` as ``rustfmt`` lays it out (a transcript's statement is one line, however
    long); as it is where rustfmt is missing or refuses it."""
    rustfmt = shutil.which("rustfmt")
    if rustfmt is None:
        return source
    done = subprocess.run([rustfmt, "--edition", "2021"], input=source, capture_output=True, text=True, timeout=60)
    return done.stdout if done.returncode == 0 and done.stdout else source
