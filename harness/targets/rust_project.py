"""The cargo project of a candle or burn reproducer: ``Cargo.toml``, generated from the probe
workspace, and ``src/main.rs``, the probe's transcript of the case wrapped in a ``main``
(``harness/targets/rust_reproducer.py``), which depends on the framework's crates and std only.

Crate versions and features come from the probe's Cargo.toml and the profile from the workspace's,
so a reproducer builds what the probe built. ``unify_with_probes`` (test builds) lists the whole
probe workspace's dependency set instead: cargo unifies features over everything one build
resolves, so only that set gives every dependency the workspace's features, and so the compiled
artifacts of a ``CARGO_TARGET_DIR`` shared with the probes (see ``harness/targets/reproducers.py``).
A test build also asks for the features the probes' last build switched on (``FULL=1``: burn's
``wgpu`` and ``fusion``), for the same reason.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from harness.build import built_features
from harness.escaping import toml_str
from harness.paths import PROBES_WORKSPACE


def write_cargo_project(
    dest: Path,
    package: str,
    framework: str,
    crates: tuple[str, ...],
    main_rs: str,
    unify_with_probes: bool = False,
    version: str | None = None,
) -> Path:
    """Writes the project at ``dest`` (created if missing) and returns ``dest``. ``crates``: the
    framework's crates the program uses (its scaffold's); ``version``: the framework's crates at
    exactly that release instead of the probe's (a bisection)."""
    (dest / "src").mkdir(parents=True, exist_ok=True)
    (dest / "Cargo.toml").write_text(
        cargo_toml(package, framework, crates, unify_with_probes, version), encoding="utf-8"
    )
    (dest / "src" / "main.rs").write_text(main_rs, encoding="utf-8")
    return dest


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


def _dependencies(
    framework: str, crates: tuple[str, ...], unify_with_probes: bool
) -> tuple[dict[str, dict], dict[str, dict]]:
    """(dependencies, build-dependencies) of a reproducer of ``framework`` using ``crates``."""
    probe_deps = _member_deps(PROBES_WORKSPACE / f"{framework}_probe")
    deps = {name: probe_deps[name] for name in crates}
    if not unify_with_probes:
        return deps, {}
    workspace = _with_built_features(_workspace_deps("dependencies"))
    for name in crates:
        deps[name] = _merge_spec(name, probe_deps[name], workspace[name])
    return {**deps, **{k: v for k, v in workspace.items() if k not in deps}}, _workspace_deps("build-dependencies")


def _with_built_features(deps: dict[str, dict]) -> dict[str, dict]:
    """``deps`` with the dependency features that the probes' last build switched on through
    their own features (``burn_probe/wgpu`` -> burn's ``wgpu`` and ``fusion``): the features a
    test build must ask for to resolve every dependency as that build did."""
    out = {name: dict(spec) for name, spec in deps.items()}
    for switched in built_features():
        member, _, feature = switched.partition("/")
        table = _load_toml(PROBES_WORKSPACE / member / "Cargo.toml").get("features", {})
        for entry in table.get(feature, []):
            dep, sep, dep_feature = entry.partition("/")
            dep = dep.rstrip("?")
            if sep and dep in out:
                out[dep]["features"] = sorted(set(out[dep].get("features", [])) | {dep_feature})
    return out


def cargo_toml(
    package: str,
    framework: str,
    crates: tuple[str, ...],
    unify_with_probes: bool = False,
    version: str | None = None,
) -> str:
    """The reproducer's Cargo.toml: its framework's crates, pinned as in the probe (or at exactly
    ``version``), the probe's features and the probe workspace's profiles. ``unify_with_probes``
    (test builds only) lists the whole probe workspace's dependency set instead (see the module
    docstring)."""
    deps, build_deps = _dependencies(framework, crates, unify_with_probes)
    if version is not None:
        # The framework's own crates share its release number (`half`, say, does not).
        deps = {
            k: ({**spec, "version": f"={version}"} if k in crates and k.startswith(framework) else spec)
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
