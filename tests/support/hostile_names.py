"""What both tiers of the hostile names tests share: ``HOSTILE``, ``rename``, ``hostile_names``, ``names_bound_count``, ``back``, ``DRAWN_PER_RUN``, ``hostile_cases``."""

from __future__ import annotations

from dataclasses import replace

from harness.case import ops
from harness.case.case_file import load_case
from harness.case.ir import Program, check_program
from harness.targets.trace import StepResult, Trace
from tests.conftest import CASES

#: Attribute and method names of ``nn.Module`` (instance state, methods, dunders), a name that
#: is the torch target's key prefix applied to another (``case_training`` next to ``training``),
#: and Python keywords and builtins (harmless to a dict, fatal to generated code that would use
#: them as identifiers).
HOSTILE = (
    "training",
    "cuda",
    "forward",
    "state_dict",
    "_parameters",
    "to",
    "register_buffer",
    "T",
    "__class__",
    "named_parameters",
    "zero_grad",
    "eval",
    "_buffers",
    "_modules",
    "__dict__",
    "__init__",
    "_apply",
    "__getattr__",
    "__setattr__",
    "_version",
    "parameters",
    "train",
    "load_state_dict",
    "add_module",
    "get_buffer",
    "register_parameter",
    "half",
    "type",
    "_non_persistent_buffers_set",
    "__reduce_ex__",
    "__deepcopy__",
    "case_training",
    "class",
    "None",
    "lambda",
    "print",
)


def rename(program: Program, names: list[str]) -> tuple[Program, dict[str, str]]:
    """``program`` with every name it binds (tensors, layers and their states, snapshots,
    module_clone and save prefixes and what they bind) taken from ``names`` in binding order, and
    the map from each new name back to the old one. Built like ``minimize.canonical_names``."""
    fresh = iter(names)
    mapping: dict[str, str] = {}
    for t in program.tensors:
        mapping[t.name] = next(fresh)
    layers = []
    for layer in program.layers:
        layers.append(replace(layer, name=next(fresh)))
        mapping[layer.name] = layers[-1].name
        for (old, _, _), (new, _, _) in zip(layer.states(), layers[-1].states()):
            mapping[old] = new
    params = program.model_names
    renamed = []
    for op in program.ops:
        spec = ops.spec(op)
        op = dict(op)
        for f in spec.of_kind("name"):
            op[f.name] = mapping[op[f.name]]
        for f in spec.of_kind("new"):
            mapping[op[f.name]] = op[f.name] = next(fresh)
        for f in (*spec.of_kind("checkpoint"), *spec.of_kind("layer")):
            op[f.name] = mapping[op[f.name]]
        for f in spec.of_kind("prefix"):
            old = op[f.name]
            op[f.name] = mapping[old] = next(fresh)
            for p in params:
                mapping[f"{old}.{p}"] = f"{op[f.name]}.{mapping[p]}"
        renamed.append(op)
    tensors = tuple(replace(t, name=mapping[t.name]) for t in program.tensors)
    out = Program(
        tensors,
        check_program(tensors, renamed, layers=tuple(layers), dtype=program.dtype),
        program.title,
        program.meta,
        tuple(layers),
        program.inert,
        program.dtype,
    )
    return out, {new: old for old, new in mapping.items()}


def hostile_names(offset: int, count: int) -> list[str]:
    """``count`` distinct names: ``HOSTILE`` from ``offset`` on, round, then ``HOSTILE`` names
    with a suffix (still identifiers) should a case bind more names than it holds."""
    rotated = [HOSTILE[(offset + k) % len(HOSTILE)] for k in range(len(HOSTILE))]
    return (rotated + [f"{n}_{k}" for k in range(1, 9) for n in rotated])[:count]


def names_bound_count(program: Program) -> int:
    """How many names ``rename`` takes for ``program``."""
    return (
        len(program.tensors)
        + len(program.layers)
        + sum(len(ops.spec(op).of_kind(kind)) for op in program.ops for kind in ("new", "prefix"))
    )


def back(trace: Trace, old_of: dict[str, str]) -> Trace:
    """The trace with every name mapped back to the original case's."""

    def names(obs: dict) -> dict:
        return {old_of[n]: o for n, o in obs.items()}

    return Trace(
        trace.target,
        trace.status,
        trace.message,
        names(trace.initial),
        [StepResult(s.status, s.message, names(s.changed)) for s in trace.steps],
        trace.elapsed_us,
    )


#: Cases whose outcome on a target is drawn afresh on every run, so that two runs which agree
#: say nothing about a third: candle's VarMap visits its vars in the order of a HashMap with its
#: own random hasher keys (the case is about that order).
DRAWN_PER_RUN = {"candle_failed_load_sets_a_subset_in_hashmap_order.toml"}


def hostile_cases() -> list[tuple[str, Program, Program, dict[str, str]]]:
    """Every case of tests/cases but ``DRAWN_PER_RUN``, as written and renamed (``(file name,
    case, renamed, new -> old)``)."""
    out = []
    for k, path in enumerate(sorted(CASES.glob("*.toml"))):
        if path.name in DRAWN_PER_RUN:
            continue
        program = load_case(path)
        renamed, old_of = rename(program, hostile_names(3 * k, names_bound_count(program)))
        out.append((path.name, program, renamed, old_of))
    return out
