"""The cargo project of a candle or burn reproducer: its Cargo.toml, generated from the probe
workspace, and what the burn writer of its ``src/main.rs`` needs (``MainWriter``, the Rust
literals, and the probe's ``support.rs`` copied in).

A project is ``Cargo.toml`` and ``src/main.rs``: for candle, the probe's transcript of the case
wrapped in a ``main`` (``harness/targets/rust_reproducer.py``); for burn, the program written by
its writer, with ``src/support.rs`` the probe's own ``rust_probes/burn_probe/src/support.rs``
copied verbatim, so that the reproducer runs the very helper code the probe compiled (that file
depends on the framework's crates and std only).

Crate versions and features come from the probe's Cargo.toml and the profile from the workspace's,
so a reproducer builds what the probe built. ``unify_with_probes`` (test builds) lists the whole
probe workspace's dependency set instead: cargo unifies features over everything one build
resolves, so only that set gives every dependency the workspace's features, and so the compiled
artifacts of a ``CARGO_TARGET_DIR`` shared with the probes (see ``harness/targets/reproducers.py``).
"""

from __future__ import annotations

import copy
import re
import shutil
import tomllib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, ClassVar

from harness.case import ops
from harness.case.ir import Program
from harness.escaping import rust_comment, rust_str, toml_str, visible
from harness.paths import PROBES_WORKSPACE
from harness.targets.reproducer_base import (
    Check,
    Run,
    comment_lines,
    op_text,
    optimizer_key,
    statuses,
    step_fields,
    without_run,
)

# The crates a reproducer of each framework depends on (their version and features are read from
# the probe's Cargo.toml); everything else a probe depends on is the harness's, not the user's.
FRAMEWORK_CRATES = {"candle": ("candle-core", "candle-nn", "half"), "burn": ("burn",)}


def support_source(framework: str) -> Path:
    """The probe's helper module that every reproducer of ``framework`` gets as ``src/support.rs``."""
    return PROBES_WORKSPACE / f"{framework}_probe" / "src" / "support.rs"


def write_cargo_project(
    dest: Path, package: str, framework: str, main_rs: str, unify_with_probes: bool = False, version: str | None = None
) -> Path:
    """Writes the project at ``dest`` (created if missing) and returns ``dest``. ``version``: the
    framework's crates at exactly that release instead of the probe's (a bisection)."""
    (dest / "src").mkdir(parents=True, exist_ok=True)
    (dest / "Cargo.toml").write_text(cargo_toml(package, framework, unify_with_probes, version), encoding="utf-8")
    (dest / "src" / "main.rs").write_text(main_rs, encoding="utf-8")
    if support_source(framework).exists():  # burn's reproducers still call the probe's helpers
        shutil.copyfile(support_source(framework), dest / "src" / "support.rs")
    return dest


def main_head(framework: str, backend: str, title: str) -> list[str]:
    """The first lines of a generated main.rs: what it is, and the shared helpers in scope. The
    case's ``title`` (a finding's sentence, a panic message of several lines) is doc-comment text,
    every line of it (``escaping.rust_comment``)."""
    return [
        *rust_comment(f"aliasfuzz reproducer ({framework}, {backend}): {title}", "//!"),
        f"//! Generated from the minimized case; depends only on {framework}. Prints every bound name after every op.",
        f"//! `support.rs` is the {framework} probe's own helper module (rust_probes/{framework}_probe/src/support.rs),",
        "//! copied verbatim: the framework calls behind the ops that take more than one.",
        "// A program uses only some of the helpers and names (dead_code, unused_*); a variable spells",
        "// its name's `_` as `__` and an upper-case name keeps its case (non_snake_case).",
        "#![allow(unused_variables, unused_mut, unused_imports, deprecated, dead_code, non_snake_case, clippy::all)]",
        "mod support;",
        "use support::*;",
    ]


class MainWriter:
    """The body of a generated ``main``: the program's tensors declared, then each op (or the
    comment that stands for it) followed by a ``show`` of every bound name. A framework's writer
    subclasses it with ``declare``, ``show`` and one emitter per op kind (``EMITTERS``)."""

    framework: ClassVar[str]
    EMITTERS: ClassVar[dict[str, Callable[[Any, dict], None]]] = {}

    def __init__(self) -> None:
        self.body: list[str] = []
        self.check: Check | None = None  # set for the first run of a case whose finding is known
        self._optimizers: dict[tuple, str] = {}
        self.checkpoints: dict[str, str] = {}  # what each translated ``save`` kept: "memory" | "file"
        self.accumulating = False  # a translated ``backward`` ran since the last step

    def declare(self, tensor) -> None:
        raise NotImplementedError

    def show(self, label: str) -> None:
        raise NotImplementedError

    def bound(self, name: str) -> bool:
        """Whether ``name`` has a translation (a snapshot by a method without one has none)."""
        raise NotImplementedError

    def untranslatable(self, op: dict) -> tuple[str, str] | None:
        """(status, message) where an op the framework ran cannot be written here: one of its
        inputs (a name or a checkpoint) has no translation."""
        if any(not self.bound(name) for name in ops.reads(op)):
            return "not translated", "its input was not translated"
        if any(c not in self.checkpoints for c in ops.checkpoints_read(op)):
            return "not translated", "its checkpoint was not translated"
        return None

    def not_run(self, op: dict) -> None:
        """Called for an op that is only a comment (its snapshot, say, binds nothing)."""

    def optimizer(self, op: dict, ctor: str, args: Iterable[str], suffix: str = "") -> str:
        """The variable of the live optimizer a ``step`` or ``set_lr`` names (``optimizer_key``),
        declared where it is first named as ``let mut optN = ctor(args)suffix;``, as the probes
        key theirs. ``args`` names hyper-parameters (``kind``, ``lr``, ``momentum``,
        ``dampening``, ``betas``, ``eps``, ``weight_decay``) as Rust literals; anything else is
        passed as written."""
        key = optimizer_key(op)
        if key not in self._optimizers:
            self._optimizers[key] = var = f"opt{len(self._optimizers)}"
            f = step_fields(op)
            fields = {
                "kind": rust_str(f["optimizer"]),
                "lr": rust_float(f["lr"]),
                "momentum": rust_float(f["momentum"]),
                "dampening": rust_float(f["dampening"]),
                "betas": f"[{rust_float(f['betas'][0])}, {rust_float(f['betas'][1])}]",
                "eps": rust_float(f["eps"]),
                "weight_decay": rust_float(f["weight_decay"]),
            }
            self.body.append(f"    let mut {var} = {ctor}({', '.join(fields.get(a, a) for a in args)}){suffix};")
        return self._optimizers[key]

    def has_optimizer(self, op: dict) -> bool:
        return optimizer_key(op) in self._optimizers

    def refile_optimizer(self, op: dict) -> None:
        """After a ``set_lr``: its optimizer is named by learning rate ``to`` from now on."""
        self._optimizers[optimizer_key(op, op["to"])] = self._optimizers.pop(optimizer_key(op))

    #: How a call that fails is made and its error caught: ``"result"``, a closure returning the
    #: framework's ``Result`` (candle's calls return errors); ``"panic"``, ``catch_unwind``
    #: (burn's calls panic).
    ERRORS: ClassVar[str] = "result"
    #: The ``Result`` type of a ``"result"`` closure.
    RESULT: ClassVar[str] = "candle_core::Result<()>"

    def failing(self, i: int, op: dict, message: str | None, label: str) -> None:
        """Op ``i``, which the framework reported an error for: its call is made, inside a closure
        that catches the error, which is printed (``op 1: error: ...``). Like the probe, whose
        state a failed op leaves as it was, the writer then binds nothing the op would have."""
        state = {k: copy.deepcopy(v) for k, v in vars(self).items() if k != "body"}
        start = len(self.body)
        self.EMITTERS[op["op"]](self, op)
        inner = ["    " + line for line in self.body[start:]]
        del self.body[start:]
        vars(self).update(state)
        self.not_run(op)
        self.body += [
            f"    // op {i}: {op_text(op)}",
            *("    " + x for x in rust_comment(f"{self.framework} reported an error here: " + (message or ""))),
        ]
        # The finding's divergence is this op failing: it shows when the call fails here too.
        shows = (
            " divergence = true;"
            if self.check is not None and self.check.want is None and self.check.op == i and label == self.check.label()
            else ""
        )
        if self.ERRORS == "panic":
            self.body += [
                "    let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {",
                *inner,
                "    }));",
                "    if let Err(payload) = failed {",
                "        let message = payload.downcast_ref::<String>().cloned()",
                "            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default();",
                f'        println!("{label}: error: {{message}}");{shows}',
                "    }",
            ]
        else:
            self.body += [
                f"    let failed = (|| -> {self.RESULT} {{",
                *inner,
                "        Ok(())",
                "    })();",
                f'    if let Err(e) = failed {{ println!("{label}: error: {{e}}");{shows} }}',
            ]

    def values_of(self, name: str) -> str:
        """A Rust expression of ``name``'s values as a ``Vec<f32>`` (for the check)."""
        raise NotImplementedError

    def check_after(self, label: str) -> None:
        """The check's comparison, after the op it is about has been shown."""
        c = self.check
        if c is None or c.want is None or label != c.label() or not c.subject or not self.bound(c.subject):
            return
        want = rust_f32_list(c.want)
        self.body.append(
            f"    divergence |= check_values({rust_str(c.subject)}, &{self.values_of(c.subject)}, "
            f"&{want}, {rust_str(c.source)});"
        )

    def op(self, i: int, op: dict, status: str, message: str | None, label: str | None = None) -> None:
        if status == "ok":
            status, message = self.untranslatable(op) or (status, message)
        if status == "error" and op["op"] in self.EMITTERS:
            self.failing(i, op, message, (label or f"after op {i}").replace("after op", "op"))
        elif status != "ok":
            self.body += ["    " + x for x in comment_lines("//", i, op, status, message)]
            self.not_run(op)
        elif op["op"] in self.EMITTERS:
            self.body.append(f"    // op {i}: {op_text(op)}")
            self.EMITTERS[op["op"]](self, op)
        else:
            self.body += [f"    // op {i}: {op_text(op)}", f"    // {op['op']}: {self.framework} has no such call"]
        self.show(label or f"after op {i}")
        self.check_after(label or f"after op {i}")

    def declare_layer(self, layer) -> None:
        """Declares one of the program's layers, after every tensor (as the probes open a
        session): a writer whose framework has layers overrides it."""
        self.body.append(f"    // layer {visible(layer.name)}: {self.framework} reproducers declare no layers")

    def lines(self, program: Program, repro: dict | None, run: Run | None = None) -> list[str]:
        """The body lines for ``program``; ``repro`` (the finding's repro JSON) says which ops the
        framework ran. ``run``: the second run of a metamorphic case (``runs``), which labels its
        lines ``without: ...`` and numbers its ops as the case does."""
        prefix, numbers = ("", range(len(program.ops))) if run is None else (run.prefix, run.numbers)
        st = statuses(repro, self.framework)
        for t in program.tensors:
            self.declare(t)
        for layer in program.layers:
            self.declare_layer(layer)
        self.show(prefix + "initial")
        for k, (i, op) in enumerate(zip(numbers, program.ops)):
            self.body.append("")
            self.op(i, op, *st.get(k, ("ok", None)), label=f"{prefix}after op {i}")
        return self.body


def main_body(
    program: Program,
    repro: dict | None,
    writer: Callable[[], MainWriter],
    prelude: list[str],
    check: Check | None = None,
) -> list[str]:
    """The lines of ``main`` after its header: ``prelude`` then the program's run; for a
    metamorphic case, both runs, each in a block of its own (the second prints ``without: ...``).
    With a ``check``, the first run compares what the divergence expects and ``main`` ends by
    saying whether it shows, exiting 1 when it does (``check_tail``)."""
    first = writer()
    first.check = check
    head = ["    let mut divergence = false;  // set where the finding's divergence shows"] if check else []
    second = without_run(program, repro)
    if second is None:
        return [*head, *prelude, *first.lines(program, repro)]
    group = list(program.inert)
    return [
        *head,
        "    // A metamorphic case: the program with its inert ops " + f"{group}, then without them.",
        "    {",
        *prelude,
        *first.lines(program, repro),
        "    }",
        f'    println!("== without the inert ops {group} ==");',
        "    {",
        *prelude,
        *writer().lines(second.program, second.repro, second),
        "    }",
    ]


def check_tail(check: Check | None) -> list[str]:
    """The last lines of a checked ``main``: whether the divergence shows, and exit 1 when it does."""
    if check is None:
        return []
    return [
        "    if divergence {",
        '        println!("the divergence shows");',
        "        std::process::exit(1);",
        "    }",
        '    println!("the divergence does not show");',
    ]


#: ``check_values``, written after ``main`` of a checked reproducer.
CHECK_VALUES = [
    "",
    "/// Prints the values the divergence expects beside those observed; true when they differ.",
    "fn check_values(name: &str, got: &[f32], want: &[f32], source: &str) -> bool {",
    "    let same = |a: f32, b: f32| (a.is_nan() && b.is_nan()) || (a - b).abs() <= 1e-4 * b.abs().max(1.0);",
    "    let differ = got.len() != want.len() || got.iter().zip(want).any(|(a, b)| !same(*a, *b));",
    '    println!("check: {name} = {got:?}; the divergence expects {want:?} ({source}): {}",',
    '             if differ { "it differs" } else { "it agrees" });',
    "    differ",
    "}",
]


# ------------------------------------------------------------------------------------------------
# Rust literals.


def rust_float(v: float) -> str:
    """A float literal (``1.5``, ``2.0``, ``1e-08``) or ``f32::NAN`` / ``f32::INFINITY``."""
    text = repr(float(v))
    if text in ("inf", "-inf", "nan"):
        return {"inf": "f32::INFINITY", "-inf": "f32::NEG_INFINITY", "nan": "f32::NAN"}[text]
    return text if ("e" in text or "." in text) else text + ".0"


def rust_f32(literal: str) -> str:
    """A float literal typed f32 (``1.5f32``); ``f32::NAN`` and the like are already."""
    return literal if literal.startswith("f32::") else literal + "f32"


def rust_f32_list(values: Iterable[float]) -> str:
    """A ``Vec<f32>`` literal: the first element carries the type (an unsuffixed literal would make
    ``Var::from_vec``/``TensorData::new``, generic over the element type, build an F64 tensor)."""
    items = [rust_float(v) for v in values]
    if not items:
        return "Vec::<f32>::new()"
    return "vec![" + ", ".join([rust_f32(items[0]), *items[1:]]) + "]"


def ident(name: str) -> str:
    """A Rust variable name for a program name: ``v_`` then the name with ``_`` written ``__`` and
    ``.`` written ``_d`` (``p0`` -> ``v_p0``, ``m.w_1`` -> ``v_m_dw__1``). Two names never get one
    variable (``c.w`` and ``c_w`` are ``v_c_dw`` and ``v_c__w``), and a writer's own suffixes
    (``_map``, ``_cache``, ``_3``: ``_`` then neither ``_`` nor ``d``) never make another name's."""
    if not re.fullmatch(r"[A-Za-z0-9_.]+", name):  # a case's names are checked (values.NAME_RE)
        raise ValueError(f"not a program name: {name!r}")
    return "v_" + name.replace("_", "__").replace(".", "_d")


# ------------------------------------------------------------------------------------------------
# Cargo.toml from the probe workspace.


def _load_toml(path: Path) -> dict:
    return tomllib.loads(path.read_text(encoding="utf-8"))


def _workspace() -> dict:
    return _load_toml(PROBES_WORKSPACE / "Cargo.toml")


def _workspace_members() -> list[Path]:
    out: list[Path] = []
    for pattern in _workspace().get("workspace", {}).get("members", []):
        out += sorted(p for p in PROBES_WORKSPACE.glob(pattern) if (p / "Cargo.toml").exists())
    return out


def _spec(spec: Any) -> dict:
    return {"version": spec} if isinstance(spec, str) else dict(spec)


def _member_deps(member: Path, table: str = "dependencies") -> dict[str, dict]:
    """A workspace member's registry dependencies (path deps, i.e. other members, left out),
    ``workspace = true`` entries spelled out, each as a table (``{ version = ... }``)."""
    wsdeps = _workspace().get("workspace", {}).get("dependencies", {})
    out: dict[str, dict] = {}
    for name, spec in _load_toml(member / "Cargo.toml").get(table, {}).items():
        if isinstance(spec, dict) and spec.get("workspace"):
            extra = list(spec.get("features", []))
            spec = _spec(wsdeps[name])
            if extra:
                spec["features"] = sorted(set(spec.get("features", [])) | set(extra))
        spec = _spec(spec)
        if "path" not in spec:
            out[name] = spec
    return out


def _merge_spec(name: str, a: dict, b: dict) -> dict:
    """Two members' requirements on one crate, as cargo unifies them (one version, the union of
    the features, default features if either wants them)."""
    if a == b:
        return a
    other = {k: v for k, v in {**a, **b}.items() if k not in ("features", "default-features")}
    if a.get("version") != b.get("version") or any(a.get(k) != b.get(k) for k in other if k != "version"):
        raise ValueError(f"rust_probes: members require {name} differently: {a} vs {b}")
    out = dict(other)
    feats = sorted(set(a.get("features", [])) | set(b.get("features", [])))
    if feats:
        out["features"] = feats
    if a.get("default-features", True) is False and b.get("default-features", True) is False:
        out["default-features"] = False
    return out


def _workspace_deps(table: str) -> dict[str, dict]:
    """The union of every probe workspace member's registry dependencies of one kind."""
    out: dict[str, dict] = {}
    for member in _workspace_members():
        for name, spec in _member_deps(member, table).items():
            out[name] = _merge_spec(name, out[name], spec) if name in out else spec
    return out


def _toml_key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else toml_str(k)


def _toml_value(v: Any) -> str:
    if isinstance(v, str):
        return toml_str(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(v)


def _toml_tables(prefix: str, table: dict) -> list[str]:
    """``table`` as TOML tables under ``prefix`` (nested tables as ``[prefix.key]``)."""
    scalars = {k: v for k, v in table.items() if not isinstance(v, dict)}
    lines = (
        [f"[{prefix}]", *(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in scalars.items()), ""]
        if scalars or not table
        else []
    )
    for k, v in table.items():
        if isinstance(v, dict):
            lines += _toml_tables(f"{prefix}.{_toml_key(k)}", v)
    return lines


def _dep_lines(deps: dict[str, dict]) -> list[str]:
    return [
        f"{name} = {_toml_value(spec['version'] if list(spec) == ['version'] else spec)}" for name, spec in deps.items()
    ]


_UNIFIED_NOTE = [
    "# Test build: the dependencies below are the whole probe workspace's (rust_probes/*/Cargo.toml),",
    "# not only what this program uses. cargo unifies features over the dependency graph it resolves;",
    "# with exactly the workspace's set, every dependency gets the workspace's features and so the same",
    "# build hash, and a CARGO_TARGET_DIR shared with `cargo build --workspace --bins` in rust_probes",
    "# reuses every compiled dependency (a candle- or burn-only set rebuilds serde, half, rand,",
    "# candle-core or burn and everything above them: minutes instead of seconds).",
]


def _dependencies(framework: str, unify_with_probes: bool) -> tuple[dict[str, dict], dict[str, dict]]:
    """(dependencies, build-dependencies) of a reproducer of ``framework``."""
    probe_deps = _member_deps(PROBES_WORKSPACE / f"{framework}_probe")
    deps = {name: probe_deps[name] for name in FRAMEWORK_CRATES[framework]}
    if not unify_with_probes:
        return deps, {}
    workspace = _workspace_deps("dependencies")
    for name in FRAMEWORK_CRATES[framework]:
        deps[name] = _merge_spec(name, probe_deps[name], workspace[name])
    return {**deps, **{k: v for k, v in workspace.items() if k not in deps}}, _workspace_deps("build-dependencies")


def cargo_toml(package: str, framework: str, unify_with_probes: bool = False, version: str | None = None) -> str:
    """The reproducer's Cargo.toml: its framework's crates, pinned as in the probe (or at exactly
    ``version``), the probe's features and the probe workspace's profiles. ``unify_with_probes``
    (test builds only) lists the whole probe workspace's dependency set instead (see the module
    docstring)."""
    deps, build_deps = _dependencies(framework, unify_with_probes)
    if version is not None:
        # The framework's own crates share its release number (`half`, say, does not).
        deps = {
            k: (
                {**spec, "version": f"={version}"}
                if k in FRAMEWORK_CRATES[framework] and k.startswith(framework)
                else spec
            )
            for k, spec in deps.items()
        }
    feats = _load_toml(PROBES_WORKSPACE / f"{framework}_probe" / "Cargo.toml").get("features", {})
    feature_lines = [
        f"{k} = {_toml_value(v)}"
        for k, v in feats.items()
        if all(str(f).split("/", 1)[0].rstrip("?") in deps for f in v)
    ]
    profiles = _workspace().get("profile", {})
    return "\n".join(
        [
            "# Generated by aliasfuzz (harness/targets/rust_project.py): a stand-alone reproducer.",
            f"# Crate versions and features are pinned as in rust_probes/{framework}_probe/Cargo.toml.",
            *(_UNIFIED_NOTE if unify_with_probes else []),
            "[package]",
            f"name = {toml_str(package)}",
            'version = "0.1.0"',
            'edition = "2021"',
            "publish = false",
            "",
            "[dependencies]",
            *_dep_lines(deps),
            "",
            *(["[build-dependencies]", *_dep_lines(build_deps), ""] if build_deps else []),
            "[features]",
            *feature_lines,
            "",
            "# The probes' profiles (rust_probes/Cargo.toml): their kernels are built optimised.",
            *(_toml_tables("profile", profiles) if profiles else []),
            "# Not part of any enclosing workspace.",
            "[workspace]",
            "",
        ]
    )
