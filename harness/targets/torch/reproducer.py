"""The PyTorch reproducer of a case: the torch target's transcript of it, wrapped in the smallest
script that prints what the case observes.

The torch session spells each call once and runs it from that text (``transcript.py``), so the
reproducer is the calls the target made, in order, with the case's names as variables, and
nothing else: no interpreter state, an optimizer made where the program first steps, a call that
failed made inside ``try`` with its error printed. The script prints every bound name after every
op (``after op 0: s = [1.0, 2.0]``), the lines the test suite compares with the target's trace.

Given a ``Check``, the script ends by saying whether the finding's divergence shows and exits 1
when it does. A finding between two optimizer implementations (``variants``) runs the transcript
in a function twice, the optimizers made with each implementation's keywords (``foreach=False``,
``foreach=True``), and compares the two runs. A metamorphic case runs twice: as it is, then
without its inert ops (``without: ...`` lines).

Text from the case (its title, names, messages) is written only as a literal, a comment or the
docstring, through ``harness.escaping``: never as code. Names are variables through the
transcript's own mapping (``Transcript.var``), which keeps them off keywords and builtins.
"""

from __future__ import annotations

import json
import re

from harness.case.ir import Program
from harness.escaping import comment_text, python_docstring, python_str, visible
from harness.targets.driver import run_program
from harness.targets.protocol import parse_request
from harness.targets.reproducer_base import Check, without_run
from harness.targets.torch.session import TorchProbe
from harness.targets.torch.transcript import MODULES, literal

#: The torch device of each optimizer implementation (``session.DEVICES``).
VARIANT_DEVICES = {
    "plain": "cpu",
    "foreach": "cpu+foreach",
    "fused": "cuda+fused",
    "compile": "cpu+compile",
    "inductor": "cpu+inductor",
    "graph": "cpu+graph",
}

_SHOW = [
    "def show(label, names):",
    '    for name, t in names.items(): print(f"{label}: {name} = {t.detach().cpu().reshape(-1).tolist()}")',
]
_CHECK = [
    "def check_values(name, got, want, source):",
    '    """Prints the values the divergence expects beside those observed; True when they differ."""',
    "    got = got.detach().cpu().reshape(-1).tolist()",
    "    differ = len(got) != len(want) or not all((a != a and b != b) or abs(a - b) <= 1e-4 * max(abs(b), 1.0) "
    "for a, b in zip(got, want))",
    '    print(f"check: {name} = {got}; the divergence expects {want} ({source}): '
    "{'it differs' if differ else 'it agrees'}\")",
    "    return differ",
]
_CHECK_COUNTER = [
    "def check_counter(name, t, before):",
    '    """Prints how the op moved the values and the version counter of a tensor (``before``: its',
    '    counter and values before the op); True when its values changed and its counter did not."""',
    "    version, values = before",
    "    changed = not torch.equal(values, t.detach())",
    "    hidden = changed and t._version == version",
    "    print(f\"check: {name}: values {'changed' if changed else 'unchanged'}, version counter {version} -> "
    "{t._version}: {'the write is hidden from autograd' if hidden else 'autograd sees the write'}\")",
    "    return hidden",
]
# The optimizer implementation keyword at the end of a line (``TrainingOps._new_optimizer``).
_IMPL_RE = re.compile(r", (foreach=(?:True|False)|fused=True)\)$")


def variant_of(target: str) -> str:
    """The optimizer implementation a torch target id names: ``torch:cpu+foreach`` -> ``foreach``."""
    return target.split("+", 1)[1] if "+" in target else "plain"


def transcribe(program: Program, device: str = "cpu") -> dict:
    """The torch target's trace of ``program`` on ``device``, with its transcript: the same
    ``run`` request a worker answers (PROTOCOL.md), served in this process."""
    line = json.dumps({"type": "run", "id": 0, "device": device, "program": program.to_wire(), "transcript": True})
    request = parse_request(line.encode())
    return run_program(TorchProbe(), 0, device, request.program, None, True)


class _Script:
    """One run of a transcript as script lines: ``prefix`` labels its printed lines (None: the
    function's ``label`` argument does), ``numbers`` are the case's numbers of its ops, ``indent``
    nests it in a function."""

    def __init__(
        self,
        trace: dict,
        ops: list,
        prefix: str | None = "",
        numbers=None,
        indent: str = "",
        check: Check | None = None,
        failures: bool = False,
        moved: bool = False,
    ):
        self.trace, self.ops, self.prefix, self.indent, self.check = trace, ops, prefix, indent, check
        #: Whether an op that fails is also recorded in ``failed`` (a variant script's runs).
        self.failures = failures
        #: With a ``counter`` check: record in ``moved`` whether the op moved the subject's version
        #: counter (a variant script's runs compare it) instead of checking the write is hidden.
        self.moved = moved
        self.numbers = list(numbers) if numbers is not None else list(range(len(trace.get("steps") or [])))
        self.transcript = trace.get("transcript") or {"prologue": [], "ops": [], "names": {}}
        self.variables = self.transcript["names"]
        self.bound = list(trace.get("initial") or {})  # names in binding order

    def names(self) -> str:
        """The bound names as a dict literal of their variables."""
        return "{" + ", ".join(f"{python_str(n)}: {self.variables[n]}" for n in self.bound) + "}"

    def show(self, label: str) -> str:
        label = f'label + "{label}"' if self.prefix is None else python_str(self.prefix + label)
        return f"{self.indent}show({label}, {self.names()})"

    def lines(self) -> list[str]:
        if self.trace.get("status") != "ok":
            return [
                f"{self.indent}{line}"
                for line in _comments(
                    f"torch did not run the case: {self.trace.get('status')}: {self.trace.get('message') or ''}"
                )
            ]
        out = [self.indent + line for line in self.transcript["prologue"]] + [self.show("initial")]
        # A check of an op inside a compiled run (``fused``) is made where the run ends.
        carried = False
        for k, step in enumerate(self.trace["steps"]):
            i, lines = self.numbers[k], self.transcript["ops"][k] if k < len(self.transcript["ops"]) else []
            for n in step.get("changed") or {}:
                if n not in self.bound:
                    self.bound.append(n)
            status = step.get("status", "ok")
            c = self.check
            counted = c is not None and c.counter and c.subject in self.variables and f"after op {i}" == c.label()
            if status == "ok":
                if counted:
                    v = self.variables[c.subject]
                    out.append(f"{self.indent}counter_before = ({v}._version, {v}.detach().clone())")
                out += [self.indent + line for line in lines]
            elif status == "error" and lines:
                # The call is made and its error printed, as torch raised it for the target.
                label = f"{self.prefix or ''}op {i}"
                shows = self.check is not None and self.check.want is None and label == self.check.label()
                out += [
                    f"{self.indent}try:",
                    *(f"{self.indent}    {line}" for line in lines),
                    f"{self.indent}except Exception as e:",
                    f'{self.indent}    print(f"{label}: error: {{type(e).__name__}}: {{e}}")',
                    *([f"{self.indent}    divergence = True"] if shows else []),
                    *([f"{self.indent}    failed.append({i})"] if self.failures else []),
                ]
                continue
            else:
                out += [
                    self.indent + line
                    for line in _comments(
                        f"op {i} ({visible(self.ops[k].kind)}): not run: torch reported `{visible(status)}`: "
                        f"{step.get('message') or ''}"
                    )
                ]
                continue
            checked = c is not None and c.subject in self.variables and (f"after op {i}" == c.label() or carried)
            if step.get("fused"):
                # torch's ``graph`` variant: the op's lines are in one compiled function with the
                # ops after it, called where the run ends; nothing shows before then.
                out += [f"{self.indent}# op {i} runs in the compiled function of the ops after it"]
                carried = checked
                continue
            carried = False
            counted = checked and c.counter
            out.append(self.show(f"after op {i}"))
            if counted and self.moved:
                out.append(f"{self.indent}moved = {self.variables[c.subject]}._version != counter_before[0]")
            elif counted:
                out.append(
                    f"divergence |= check_counter({python_str(c.subject)}, {self.variables[c.subject]}, counter_before)"
                )
            if checked and c.want is not None:
                out.append(
                    f"divergence |= check_values({python_str(c.subject)}, {self.variables[c.subject]}, "
                    f"{literal(list(c.want))}, {python_str(c.source)})"
                )
        return out


def _comments(text: str) -> list[str]:
    return ["# " + line for line in comment_text(text) if line.strip()]


def _header(title: str, body: list[str], check: Check | None) -> list[str]:
    """The docstring, imports and helpers: ``check_values`` where ``check`` compares values,
    ``check_counter`` where it compares a version counter."""
    used = "\n".join(body)
    helpers = []
    if check is not None and check.want is not None:
        helpers += ["", "", *_CHECK]
    if check is not None and check.counter:
        helpers += ["", "", *_CHECK_COUNTER]
    imports = [src for name, (_, src) in MODULES.items() if name in ("torch", "nn") or f"{name}." in used]
    return [
        f'"""aliasfuzz reproducer (PyTorch): {python_docstring(title)}"""',
        *imports,
        "",
        "",
        *_SHOW,
        *helpers,
        "",
        "",
    ]


def _end() -> list[str]:
    return [
        "",
        "if divergence:",
        '    print("the divergence shows")',
        "    raise SystemExit(1)",
        'print("the divergence does not show")',
    ]


def torch_script(
    program: Program, check: Check | None = None, variants: tuple[str, str] | None = None, device: str = "cpu"
) -> str:
    """The reproducer of ``program``: its transcript on the torch CPU target, wrapped. ``check``:
    what says whether the finding's divergence shows; the script then ends by saying so, and
    exits 1 when it does. ``variants`` (two optimizer implementations, ``VARIANT_DEVICES``): the
    script runs the program with each and its check compares the two runs (with a ``counter``
    check, whether the op moved the subject's version counter in each). ``device``: the torch
    device the script's transcript is of (``cpu+compile`` for a finding of the compiled variant)."""
    title = program.title or "case"
    if variants is not None:
        return _variant_script(program, title, variants, check if check is not None and check.counter else None)
    body = _Script(transcribe(program, device), program.ops, check=check).lines()
    second = without_run(program, None)
    if second is not None:
        body += [
            "",
            f"# The case without its inert ops {list(program.inert)}, from a fresh model.",
            *_Script(transcribe(second.program), second.program.ops, second.prefix, second.numbers).lines(),
        ]
    if check is not None:
        body = ["divergence = False  # set where the finding's divergence shows", *body, *_end()]
    return "\n".join(_header(title, body, check) + body) + "\n"


def _variant_script(program: Program, title: str, variants: tuple[str, str], counter: Check | None = None) -> str:
    """One function over the transcript, its optimizers made with ``**impl``, run with each
    implementation's keywords (two functions, one per variant's transcript, where they differ in
    more than that: ``compile``); the names the two runs leave with different values are the
    divergence."""
    runs = [transcribe(program, VARIANT_DEVICES[v]) for v in variants]
    # Where an op fails on either side (a compiler error), each run also returns the ops that
    # failed, and the two lists are compared with the values.
    failures = any(s.get("status") == "error" for tr in runs for s in tr.get("steps") or [])
    scripts = [
        _Script(tr, program.ops, None, indent="    ", check=counter, failures=failures, moved=True) for tr in runs
    ]
    texts = [script.lines() for script in scripts]  # after lines(), a script's names are all bound
    start, returned = (["    failed = []"], ", failed") if failures else ([], "")
    unpacked = ("first, first_failed", "second, second_failed") if failures else ("first", "second")
    if counter is not None:  # each run also says whether the op moved the subject's counter
        start, returned = [*start, "    moved = None"], f"{returned}, moved"
        unpacked = tuple(f"{u}, {u.split(',')[0]}_moved" for u in unpacked)
    keywords = []
    for tr in runs:
        found = [
            m.group(1)
            for lines in (tr.get("transcript") or {}).get("ops", [])
            for line in lines
            if (m := _IMPL_RE.search(line))
        ]
        keywords.append(found[0] if found else None)
    merged = [_IMPL_RE.sub(", **impl)", line) for line in texts[0]]
    labels = ["", f"{variants[1]}: "]
    if merged == [_IMPL_RE.sub(", **impl)", line) for line in texts[1]] and None not in keywords:
        runs_source = [
            "def run(label, **impl):",
            *start,
            *merged,
            f"    return {scripts[0].names()}{returned}",
            "",
            *(f"{v} = run({python_str(label)}, {kw})" for v, label, kw in zip(unpacked, labels, keywords)),
        ]
    else:
        # The transcripts differ in more than the optimizers (``compile`` runs tensor ops as
        # compiled functions): each run is its own function, spelled as its variant ran it.
        runs_source = []
        for variant, script, text in zip(variants, scripts, texts):
            runs_source += [
                f"def run_{variant}(label):",
                *start,
                *text,
                f"    return {script.names()}{returned}",
                "",
                "",
            ]
        runs_source += [
            f"{v} = run_{variant}({python_str(label)})" for v, variant, label in zip(unpacked, variants, labels)
        ]
    if failures:
        verdict = [
            "failing = first_failed != second_failed",
            "if differ or failing:",
            f'    print(f"the divergence shows: {{differ}} differ; ops {{first_failed}} fail without {variants[1]}, '
            f'{{second_failed}} with it")',
            "else:",
            '    print("the divergence does not show")',
            "raise SystemExit(1 if differ or failing else 0)",
        ]
    else:
        verdict = [
            'print(f"the divergence shows: {differ} differ" if differ else "the divergence does not show")',
            "raise SystemExit(1 if differ else 0)",
        ]
    counted = []
    if counter is not None:
        subject = python_str(counter.subject)
        counted = [
            f"print('check: op {counter.op} moves the version counter of ' + {subject} + f': {{first_moved}} "
            f"without {variants[1]}, {{second_moved}} with it')",
            f"if first_moved != second_moved: differ.append({subject} + '._version')",
        ]
    body = [
        *runs_source,
        # A name an op that failed in one run never bound is in that run's failures, not here.
        "differ = [name for name in first if name in second and not torch.allclose(first[name], second[name], "
        "rtol=1e-4, atol=1e-4, equal_nan=True)]",
        *counted,
        *verdict,
    ]
    return "\n".join(_header(title, body, None) + body) + "\n"
