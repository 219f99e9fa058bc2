"""The op table: every op and snapshot method of the case format, declared once (the methods in
``harness.case.methods``, re-exported here).

An op is a kind and an ordered list of fields. A field's ``kind`` says what the field is, and so
how a case file's value is checked (``harness.case.ir``), how it travels on the wire (the protocol
schema, ``harness.targets.schema``; the Python driver, ``harness.targets.driver``), which names the
op reads, binds or writes (traces, the oracle, the minimizer), and how the minimizer may simplify
it (``harness.shrinking.minimize``):

========  ===========================================================  ===========================
kind      value                                                        the minimizer
========  ===========================================================  ===========================
name      a name bound earlier; ``writes``: the op changes its values; renames only
          ``fits``: shaped like the written name's row (or whole);
          ``grows``: the op binds it again, with ``extends``'s rows appended;
          ``extends``: shaped like a row of the grown name, or like rows of it;
          ``feeds``: what the op's ``layer`` reads (its input);
          ``remakes``: the op binds it again to a new tensor of its
          shape computed from it (``x = x.relu()``);
          ``broadcasts``: shaped like the remade name, or like a row
          of it (broadcast along the first dimension)
new       a new identifier the op binds (a snapshot)                   renames only
prefix    binds ``<prefix>.<p>`` for every trainable tensor ``p``      renames only
          (``checkpoint``: and names a checkpoint)
checkpoint  a checkpoint an earlier op took (a ``checkpoint`` prefix)    renames only
layer     a declared layer (``harness.case.layers``)                    leaves it
number    a finite float32 (``positive``: > 0)                         tries ``shrink(x)``
choice    one of ``choices`` (``ordered``: simplest first)            tries the earlier choices
row       ``None`` (the whole tensor) or a first-dimension index       tries row 0
          of the written name (``of``: of that ``name`` field instead)
values    row-major floats shaped like the ``name`` field's row/whole  smaller, rounder values
betas     two numbers in [0, 1)                                        leaves them
flag      ``true`` or ``false``                                        tries ``false``
========  ===========================================================  ===========================

Invariants, which ``tests/unit/case/test_op_table.py`` checks:

- an op's fields are listed in canonical order (the order of its canonical dict and of the
  fields a written case file shows); ``op`` itself is not a field;
- a field with a ``Derived`` default is computed from the op's other fields when absent, and
  recomputed when the minimizer simplifies a field it depends on;
- every op has at most one ``name`` field with ``writes``, one ``row`` field of it and one
  ``values`` field; a ``row`` field with ``of`` follows the one without (``of_kind("row")[0]``
  is the written name's row);
- the schema file, the Rust protocol's enums and every probe's handshake name exactly these ops
  and methods.
"""

from __future__ import annotations

import copy
import keyword
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# The snapshot methods' part of the table lives in its own module; callers name them ops.X.
from harness.case.methods import (  # noqa: F401
    METHOD_TABLE,
    METHODS,
    METHODS_BY_NAME,
    MethodSpec,
    apply_view,
    bf16_rounded,
    snapshot_shape,
)

FIELD_KINDS = ("name", "new", "prefix", "checkpoint", "layer", "number", "choice", "row", "values", "betas", "flag")

#: The marker of a field without a default: a case must give it.
REQUIRED = object()


@dataclass(frozen=True)
class Derived:
    """A default computed from another field of the op (``step``'s momentum from its optimizer):
    filled in when absent, and recomputed when the minimizer changes ``depends_on``."""

    depends_on: str
    compute: Callable[[Mapping[str, Any]], Any]


@dataclass(frozen=True)
class Field:
    name: str
    kind: str
    default: Any = REQUIRED
    choices: tuple[str, ...] = ()  # ``choice``: the values, simplest first when ``ordered``
    ordered: bool = True  # ``choice``: the minimizer may replace a choice by an earlier one
    writes: bool = False  # ``name``: the op changes the named tensor's values
    roles: tuple[str, ...] = ()  # ``name``: the roles it accepts (empty: any bound name)
    fits: bool = False  # ``name``: shaped like the row (or whole) of the op's written name
    of: str | None = None  # ``row``: the ``name`` field it indexes (None: the written one)
    checkpoint: bool = False  # ``prefix``: the prefix also names a checkpoint a ``load`` can read
    rebinds: bool = False  # ``name``: the op rebinds it to what it makes of the op's other name
    grows: bool = False  # ``name``: the op rebinds it to a new, longer tensor: it with ``extends`` appended
    extends: bool = False  # ``name``: what the grown name is extended by (a row of it, or rows)
    feeds: bool = False  # ``name``: the input of the op's ``layer`` field (shaped as the layer reads)
    remakes: bool = False  # ``name``: the op rebinds it to a new tensor of its shape computed from it
    broadcasts: bool = False  # ``name``: shaped like the remade name or like a row of it
    positive: bool = False  # ``number``: strictly positive
    wide: bool = False  # ``number``/``betas``: f64 in the probes (optimizer hyper-parameters), else f32
    shrink: Callable[[float], tuple[float, ...]] = lambda x: ()  # ``number``: simpler values
    cost: Callable[[Any], float] = lambda x: 0.0  # ``number``: how far from the simplest

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


@dataclass(frozen=True)
class OpSpec:
    """One op kind. ``label`` names the op in findings (``step:adam``); ``signature_class`` is
    the coarser kind verdict and identity signatures use, because which write or which optimizer
    moved a source rarely changes *whether* a snapshot follows it."""

    kind: str
    fields: tuple[Field, ...]
    doc: str
    label: Callable[[Mapping[str, Any]], str] | None = None
    signature_class: Callable[[Mapping[str, Any]], str] | None = None
    #: The op replaces what the model holds: run on one side only, the two models differ from
    #: then on by construction (the oracle compares nothing after it).
    replaces_model: bool = False
    #: The op changes every trainable tensor the model holds without naming one (a step trains
    #: them, a load overwrites them): its effect on each is its own, not a snapshot relation's.
    acts_on_params: bool = False
    #: The op changes the running state of its ``layer`` (a ``forward`` in training mode).
    acts_on_layer: bool = False
    #: The op's calls are tensor computations a compiler can trace with those of the ops around
    #: it: a run of such ops is one compiled function in torch's ``graph`` variant, observed only
    #: after the run's last op (``fusable``). Model-level ops (steps, moves, checkpoints, modes,
    #: surgery, a forward through a layer) are not: each is its own observation point.
    fuses: bool = False

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    def of_kind(self, kind: str) -> tuple[Field, ...]:
        return tuple(f for f in self.fields if f.kind == kind)


TENSOR_KINDS = ("param", "buffer", "lazy")
#: The float dtypes a case's tensors may have, simplest first: one per case (``Program.dtype``),
#: every tensor and layer state of the case made in it. Values travel as float32, which holds
#: every f16 and bf16 value exactly.
DTYPES = ("f32", "bf16", "f16")
#: How a lazy tensor initialises: every element ``fill``; uniform in [-1, 1) from a generator
#: seeded with the tensor's own ``seed`` when it initialises (order never matters); uniform from
#: the program's one generator, seeded once when the program opens (``program_rng``: the values
#: depend on the order of first reads, as burn documents for lazy params).
LAZY_INITS = ("const", "uniform", "program_rng")
#: The lazy inits whose values come from a framework's generator: they differ between frameworks.
DRAWN_INITS = ("uniform", "program_rng")
OPTIMIZERS = ("sgd", "sgd_momentum", "adam", "adamw")
DEVICE_ROLES = ("home", "cpu", "alt")
MOVE_METHODS = ("to", "fork")
#: Where ``save`` keeps a checkpoint: what the framework returns, held in memory (torch
#: ``state_dict()``, candle the VarMap's map, burn ``into_record()``), or a file written and
#: read back (``torch.save``, ``VarMap::save``, ``save_file``).
CHECKPOINT_STORES = ("memory", "file")
#: How ``replace`` puts a value in a param's slot: a new parameter object over it (torch
#: ``nn.Parameter(v)``, candle ``Var::from_tensor``, burn ``Param::from_tensor``), the same object
#: holding it (torch ``p.data = v``, burn ``Param::map``), rebound to its storage (``p.set_(v)``), or
#: the value's own parameter object, tying the two names (torch ``b.w = a.w``, candle one ``Var``
#: under two keys, burn one ``Param`` in two fields).
REPLACE_HOWS = ("new", "data", "set", "tie")
#: ``replace`` hows that leave the same parameter object in the slot over another storage (torch
#: ``w.data = v``, ``w.set_(v)``; burn's ``Param::map`` keeps the ParamId): the name still denotes it.
SAME_OBJECT_HOWS = ("data", "set")
#: How ``append`` grows a tensor along its first dimension: the framework's concatenation, a new
#: tensor (torch ``torch.cat``, candle ``Tensor::cat``, burn ``Tensor::cat``), or a preallocated
#: buffer of ``CACHE_ROWS`` rows written in place and read as its first rows (the KV cache: torch
#: ``buf[n:n+k] = src; kv = buf[:n + k]``, candle ``candle_nn::kv_cache::Cache``, burn
#: ``slice_assign`` then ``slice``).
APPEND_HOWS = ("cat", "cache")
#: The most rows ``append`` may grow a name to, and the rows of a ``cache`` buffer: a cache never
#: has to grow, so no framework's growth policy (candle's ``grow_by``) enters a program.
CACHE_ROWS = 16
#: The element-wise functions ``map`` applies, simplest first: each is exact in float32 on every
#: value a program holds, so frameworks agree to the bit (``add_scalar`` adds 1, ``clamp`` clamps
#: to [-1, 1]).
MAP_FNS = ("neg", "relu", "add_scalar", "clamp")


def value_cost(xs: Sequence[float]) -> float:
    """How far values are from the simplest ones: 0 costs nothing, 1 little, others more."""
    return sum(0.0 if x == 0 else 1.0 if x == 1 else 2.0 + abs(x) for x in xs)


def _write_label(op: Mapping[str, Any]) -> str:
    return "write:whole" if op.get("index") is None else "write:row"


def _move_label(op: Mapping[str, Any]) -> str:
    return f"move:{op['method']}:{op['device']}"


def _write_class(op: Mapping[str, Any]) -> str:
    return "write"


#: The hyper-parameters that key a live optimizer: ``step`` and ``set_lr`` name one by them.
_OPTIMIZER_FIELDS = (
    Field("optimizer", "choice", choices=OPTIMIZERS),
    Field(
        "lr",
        "number",
        positive=True,
        wide=True,
        shrink=lambda x: (1.0,) if x != 1.0 and x > 0.5 else (),
        cost=lambda x: float(x != 1.0),
    ),
    Field(
        "momentum",
        "number",
        wide=True,
        default=Derived("optimizer", lambda op: 0.9 if op["optimizer"] == "sgd_momentum" else 0.0),
    ),
    Field(
        "dampening",
        "number",
        wide=True,
        default=0.0,
        shrink=lambda x: (0.0,) if x != 0.0 else (),
        cost=lambda x: float(x != 0.0),
    ),
    Field("betas", "betas", default=[0.9, 0.999], wide=True),
    Field("eps", "number", default=1e-8, positive=True, wide=True),
    Field(
        "weight_decay",
        "number",
        wide=True,
        default=Derived("optimizer", lambda op: 0.01 if op["optimizer"] == "adamw" else 0.0),
    ),
)

OP_TABLE: tuple[OpSpec, ...] = (
    OpSpec(
        "snapshot",
        (Field("name", "new"), Field("of", "name"), Field("method", "choice", choices=METHODS, ordered=False)),
        "binds `name` to a snapshot of `of` made with `method`",
        fuses=True,
    ),
    OpSpec(
        "write",
        (Field("target", "name", writes=True), Field("value", "values"), Field("index", "row", default=None)),
        "writes `value` in place into row `index` of `target`, or into all of it",
        label=_write_label,
        signature_class=_write_class,
        fuses=True,
    ),
    OpSpec(
        "fill",
        (
            Field("target", "name", writes=True),
            Field(
                "value",
                "number",
                shrink=lambda x: () if x in (0.0, 1.0) else (1.0, 0.0),
                cost=lambda x: value_cost([x]),
            ),
        ),
        "fills `target` in place with `value`",
        signature_class=_write_class,
        fuses=True,
    ),
    OpSpec(
        "scale",
        (
            Field("target", "name", writes=True),
            Field(
                "factor", "number", shrink=lambda x: () if x in (0.0, 2.0) else (2.0,), cost=lambda x: float(x != 2.0)
            ),
        ),
        "multiplies `target` in place by `factor`",
        signature_class=_write_class,
        fuses=True,
    ),
    OpSpec(
        "step",
        _OPTIMIZER_FIELDS,
        "one optimizer step over every trainable tensor, with each tensor's "
        "`grad`, by the live optimizer of these hyper-parameters (a new one at the first such step)",
        label=lambda op: f"step:{op['optimizer']}",
        signature_class=lambda op: "step",
        acts_on_params=True,
    ),
    OpSpec(
        "backward",
        (),
        "one backward pass of the loss (the same as a step's) without a step: the "
        "gradients accumulate, and the next `step` adds its own backward pass and steps with the sum",
    ),
    OpSpec(
        "backward_of",
        (Field("of", "name"),),
        "one backward pass of the sum of `of` through the graph that made it, the graph kept for "
        "another pass (torch: `of.sum().backward(retain_graph=True)`): where an in-place write changed "
        "a tensor the graph saved, torch's version counters refuse it; the gradients accumulate as "
        "for `backward`",
    ),
    # `to` before the optional hyper-parameters: required fields come first (canonical order).
    OpSpec(
        "set_lr",
        _OPTIMIZER_FIELDS[:2]
        + (
            Field(
                "to",
                "number",
                positive=True,
                wide=True,
                shrink=lambda x: (1.0,) if x != 1.0 and x > 0.5 else (),
                cost=lambda x: float(x != 1.0),
            ),
        )
        + _OPTIMIZER_FIELDS[2:],
        "sets the learning rate of the live optimizer of these hyper-parameters (made now if no step "
        "made it) to `to`: a later `step` with lr `to` and the same other fields continues it",
        label=lambda op: f"set_lr:{op['optimizer']}",
        signature_class=lambda op: "set_lr",
    ),
    OpSpec(
        "move",
        (
            Field("target", "name", roles=("param", "lazy")),
            Field("device", "choice", choices=DEVICE_ROLES),
            Field("method", "choice", default="to", choices=MOVE_METHODS),
        ),
        "moves the model's param `target` to `device` (`to`: to_device; `fork`: burn's fork)",
        label=_move_label,
        signature_class=_move_label,
    ),
    OpSpec(
        "module_clone",
        (Field("name", "prefix"),),
        "clones the whole model: binds `<name>.<p>` for every trainable tensor p",
    ),
    OpSpec("valid", (), "puts the model in evaluation mode (burn: valid())"),
    OpSpec("train", (), "puts the model back in training mode"),
    OpSpec("no_grad", (), "marks the model's params as not requiring grad"),
    OpSpec(
        "freeze",
        (),
        "freezes the model (burn: Module::freeze, which turns gradients and training off; torch: requires_grad_(False), the mode unchanged)",
    ),
    OpSpec("read", (Field("target", "name"),), "reads `target` (forces a lazy param's initialisation)"),
    OpSpec(
        "assign",
        (
            Field("target", "name", writes=True),
            Field("source", "name", fits=True),
            Field("index", "row", default=None),
            Field("source_index", "row", default=None, of="source"),
        ),
        "copies `source` (its row `source_index`, or all of it) in place into row `index` of `target`, "
        "or into all of it",
        label=lambda op: "assign:whole" if op.get("index") is None else "assign:row",
        signature_class=_write_class,
        fuses=True,
    ),
    OpSpec(
        "save",
        (Field("name", "prefix", checkpoint=True), Field("to", "choice", default="memory", choices=CHECKPOINT_STORES)),
        "takes a checkpoint of the whole model under `name` and binds `<name>.<p>` to what it holds "
        "for every trainable tensor p",
        label=lambda op: f"save:{op['to']}",
    ),
    OpSpec(
        "load",
        (Field("from", "checkpoint"), Field("assign", "flag", default=False)),
        "loads checkpoint `from` into the live model (`assign`: torch's load_state_dict(assign=True))",
        label=lambda op: "load:assign" if op["assign"] else "load",
        replaces_model=True,
        acts_on_params=True,
    ),
    OpSpec(
        "replace",
        (
            Field("target", "name", roles=("param", "lazy"), rebinds=True),
            Field("value", "name", fits=True),
            Field("how", "choice", default="new", choices=REPLACE_HOWS),
        ),
        "puts `value` in the model's slot of param `target` (`how`: a new parameter object, the same "
        "object holding it, or rebound to its storage); `target` reads the slot from then on",
        label=lambda op: f"replace:{op['how']}",
        replaces_model=True,
    ),
    OpSpec(
        "append",
        (
            Field("target", "name", roles=("buffer", "snapshot"), grows=True),
            Field("source", "name", extends=True),
            Field("how", "choice", default="cat", choices=APPEND_HOWS),
        ),
        "binds `target` to a longer tensor: `target` with `source` (a row of it, or rows) appended along "
        "the first dimension (`how`: a concatenation, or a preallocated KV-cache buffer)",
        label=lambda op: f"append:{op['how']}",
        fuses=True,
    ),
    OpSpec(
        "forward",
        (Field("name", "new"), Field("layer", "layer"), Field("input", "name", feeds=True)),
        "binds `name` to `layer`'s output on `input`; in training mode a batch norm updates its running "
        "statistics, and a dropout drops (p = 1) or keeps (p = 0) every element",
        acts_on_layer=True,
    ),
    OpSpec(
        "map",
        (Field("target", "name", roles=("buffer", "snapshot"), remakes=True), Field("fn", "choice", choices=MAP_FNS)),
        "binds `target` again to `fn` of it, element-wise: a new tensor (`x = x.relu()`), the old "
        "value moved into the call where the framework has value semantics (burn), whose backend may "
        "then compute in place on a buffer nobody else holds",
        label=lambda op: f"map:{op['fn']}",
        signature_class=lambda op: "map",
        fuses=True,
    ),
    OpSpec(
        "add",
        (Field("target", "name", roles=("buffer", "snapshot"), remakes=True), Field("other", "name", broadcasts=True)),
        "binds `target` again to `target + other` (`other` shaped like it, or like a row of it: "
        "broadcast along the first dimension), a new tensor, the old value moved into the call as "
        "for `map`",
        fuses=True,
    ),
)
OPS: dict[str, OpSpec] = {spec.kind: spec for spec in OP_TABLE}
OP_KINDS = tuple(OPS)
#: Ops that change a named tensor's values in place (``write``-class in signatures).
WRITE_OPS = tuple(spec.kind for spec in OP_TABLE if any(f.writes for f in spec.fields))


class Op(dict):
    """One op, parsed against the op table: its ``kind`` and every field of that kind, read as
    attributes (``op.target``, ``op.lr``; the field ``from``, a Python keyword, is ``op.from_``).

    Reading a field that the op's kind does not have raises ``AttributeError``, naming the kind
    and its fields, where a plain dict would hand back ``None`` from ``get`` or fail with a bare
    ``KeyError`` far from the mistake. That is the point of the type: code outside the case package
    says which field it reads, and the table says whether the op has it.

    An ``Op`` is also the op's canonical form as a read-only dict (``op`` then the fields, in the
    table's order): the form case files, the wire and program keys are written from, so
    ``json.dumps``, ``dict(op)`` and ``{**op, field: value}`` keep working. Changing a field
    makes a new op (``with_field``); ``Program`` turns any mapping it is given into an ``Op``, so
    every op a program holds is one. Parsing checks only the kind's structure; what the values
    must be is ``harness.case.op_checks``'s, once, when a case is loaded or built.

    A kind outside the table (only the driver's test hook ``_fault``) has no fields: every other
    key it carries is kept, and no attribute reads one.
    """

    __slots__ = ("spec",)

    def __init__(self, raw: Mapping[str, Any]):
        found = spec(raw)
        ordered = {"op": found.kind}
        for f in found.fields:
            if f.name in raw:
                ordered[f.name] = raw[f.name]
        # Keys outside the kind's fields stay, after them: only a kind outside the table has any
        # in a checked op, and check_op refuses them in a case.
        ordered.update((k, v) for k, v in raw.items() if k not in ordered)
        super().__init__(ordered)
        object.__setattr__(self, "spec", found)

    @property
    def kind(self) -> str:
        """The op's kind (its ``op`` key): ``write``, ``step``, ..."""
        return self.spec.kind

    def __getattr__(self, attr: str) -> Any:
        name = attr[:-1] if attr.endswith("_") and keyword.iskeyword(attr[:-1]) else attr
        if attr.startswith("_") or attr == "spec" or name not in _FIELD_NAMES.get(self.spec.kind, ()):
            fields = ", ".join(f.name for f in self.spec.fields) or "none"
            raise AttributeError(f"a `{self.spec.kind}` op has no field `{name}` (its fields: {fields})")
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"this `{self.spec.kind}` op was built without its field `{name}`") from None

    def _read_only(self, *args, **kwargs):
        raise TypeError("an Op is read-only: `with_field` or `{**op, field: value}` makes a changed one")

    __setitem__ = __delitem__ = __setattr__ = __delattr__ = _read_only
    clear = pop = popitem = setdefault = update = __ior__ = _read_only

    def __reduce__(self):
        return (Op, (dict(self),))

    def __copy__(self) -> Op:
        return self

    def __deepcopy__(self, memo) -> Op:
        return Op(copy.deepcopy(dict(self), memo))

    def __repr__(self) -> str:
        return f"Op({dict.__repr__(self)})"


#: Every op kind's field names, for ``Op``'s attribute check.
_FIELD_NAMES: dict[str, frozenset[str]] = {s.kind: frozenset(f.name for f in s.fields) for s in OP_TABLE}


def as_op(raw: Mapping[str, Any]) -> Op:
    """``raw`` as an ``Op``: itself when it is one."""
    return raw if isinstance(raw, Op) else Op(raw)


# ------------------------------------------------------------------------------------------------
# What an op does with names. ``op`` is in canonical form (every field present).


def spec(op: Mapping[str, Any]) -> OpSpec:
    """The table's entry for ``op``. A kind outside the table (only a target's own test hook,
    ``_fault``, in a program built in code: case validation refuses any other) has no fields, so
    it reads, binds and writes nothing."""
    if isinstance(op, Op):
        return op.spec
    found = OPS.get(op["op"])
    return found if found is not None else OpSpec(op["op"], (), "not an op of the case format")


def reads(op: Mapping[str, Any]) -> tuple[str, ...]:
    """The names ``op`` needs bound before it runs (what the Rust driver's ``Op::uses`` lists)."""
    return tuple(op[f.name] for f in spec(op).fields if f.kind == "name")


def subject(op: Mapping[str, Any]) -> str | None:
    """The tensor ``op`` acts on itself: the one it writes, fills, moves, grows or remakes (its
    ``target``), or the one a snapshot is taken of (``of``); None for an op on the model or a
    layer (a step, a load, a forward). No op has both fields."""
    return op.get("target", op.get("of"))


def checkpoints_read(op: Mapping[str, Any]) -> tuple[str, ...]:
    """The checkpoints ``op`` needs taken before it runs."""
    return tuple(op[f.name] for f in spec(op).fields if f.kind == "checkpoint")


def checkpoints_taken(op: Mapping[str, Any]) -> tuple[str, ...]:
    """The checkpoints ``op`` takes."""
    return tuple(op[f.name] for f in spec(op).fields if f.kind == "prefix" and f.checkpoint)


def written(op: Mapping[str, Any]) -> str | None:
    """The name whose values ``op`` changes in place, if it is a write-like op."""
    for f in spec(op).fields:
        if f.writes:
            return op[f.name]
    return None


@dataclass(frozen=True)
class Binding:
    """A name an op binds, the name it was made from, and how (a snapshot method or the op)."""

    name: str
    source: str
    method: str


def bindings(op: Mapping[str, Any], params: Sequence[str]) -> tuple[Binding, ...]:
    """The names ``op`` binds, in binding order; ``params`` are the model's names (``model_names``)."""
    out: list[Binding] = []
    s = spec(op)
    for f in s.fields:
        if f.kind == "new":
            source = next(op[g.name] for g in s.fields if g.kind == "name")
            out.append(Binding(op[f.name], source, op.get("method", s.kind)))
        elif f.kind == "prefix":
            how = s.label(op) if s.label else s.kind
            out.extend(Binding(f"{op[f.name]}.{p}", p, how) for p in params)
    return tuple(out)


def rebindings(op: Mapping[str, Any]) -> tuple[Binding, ...]:
    """The names ``op`` binds again, to what it makes of another name (``replace``: the
    param's slot now holds ``value``'s tensor, or a parameter over it), as snapshot relations of
    that name from ``op`` on. Unlike ``bindings``, the name was bound before and stays bound
    without ``op``."""
    s = spec(op)
    out = []
    for f in s.fields:
        if f.rebinds:
            source = next(op[g.name] for g in s.fields if g.kind == "name" and g is not f)
            out.append(Binding(op[f.name], source, label(op)))
    return tuple(out)


def grown(op: Mapping[str, Any]) -> str | None:
    """The name ``op`` binds again to a longer tensor (``append``): the name denotes a new object
    from then on, made of the old one and the op's other name."""
    for f in spec(op).fields:
        if f.grows:
            return op[f.name]
    return None


def appended_rows(target: tuple[int, ...], source: tuple[int, ...]) -> int | None:
    """How many rows a source of shape ``source`` appends to a tensor of shape ``target``: 1 for
    a row (the dims after the first), its first dim for rows of it; None when it fits neither."""
    if source == target[1:] and len(target) > 1:
        return 1
    if len(source) == len(target) and source[1:] == target[1:]:
        return source[0]
    return None


def broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether a tensor of ``shape`` may be added to one of shape ``target`` (``add``): the same
    shape, or a row of it (rank 2 or more), broadcast along the first dimension."""
    return shape == target or (len(target) > 1 and shape == target[1:])


def grown_shape(op: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]]) -> tuple[int, ...]:
    """The shape of the name ``op`` grows (``grown``), after it; unchanged when the source fits
    neither way (only in an op not checked yet: the minimizer's candidates)."""
    s = spec(op)
    target = shapes[op[next(f.name for f in s.fields if f.grows)]]
    rows = appended_rows(target, shapes[op[next(f.name for f in s.fields if f.extends)]])
    return target if rows is None else (target[0] + rows,) + target[1:]


def remade(op: Mapping[str, Any]) -> str | None:
    """The name ``op`` binds again to a new tensor made of it: one it grows (``append``) or
    computes element-wise (``map``, ``add``). The name denotes another object from then on."""
    for f in spec(op).fields:
        if f.grows or f.remakes:
            return op[f.name]
    return None


def rebound(op: Mapping[str, Any]) -> frozenset[str]:
    """The names ``op`` binds again: one it remakes (``remade``: grows or computes from itself),
    or a ``replace``'s target from another name (``rebindings``; one from itself is not a
    rebinding)."""
    names = {b.name for b in rebindings(op) if b.source != b.name}
    if remade(op) is not None:
        names.add(remade(op))
    return frozenset(names)


def rebinds(op: Mapping[str, Any], name: str) -> bool:
    """Whether ``op`` binds ``name`` again (``rebound``)."""
    return name in rebound(op)


def denotes_another_object(op: Mapping[str, Any], name: str) -> bool:
    """Whether ``name`` denotes another object after ``op`` than before (``rebinds``, unless the
    op ``keeps_object``)."""
    return rebinds(op, name) and not keeps_object(op)


def keeps_object(op: Mapping[str, Any]) -> bool:
    """Whether the names ``op`` rebinds still denote the objects they did (``SAME_OBJECT_HOWS``):
    what was a snapshot of such a name goes on being one."""
    return op["op"] == "replace" and op["how"] in SAME_OBJECT_HOWS


def bound_shape(b: Binding, shapes: Mapping[str, tuple[int, ...]]) -> tuple[int, ...]:
    """The shape of what ``op`` binds as ``b``, given the shapes bound so far."""
    return snapshot_shape(b.method, shapes[b.source])


def model_names(tensors, layers=()) -> list[str]:
    """The names the model holds: its trainable tensors, then its layers' running statistics
    (what a ``prefix`` field binds under the prefix)."""
    return [t.name for t in tensors if t.trainable] + [n for layer in layers for n, _, _ in layer.states()]


def walk(tensors, ops: Sequence[Mapping[str, Any]], layers=()):
    """Yields ``(i, op, shapes)`` for every op, ``shapes`` being every name bound before op ``i``
    and its shape (one dict, updated in place after each yield)."""
    shapes = {t.name: t.shape for t in tensors} | {n: shape for layer in layers for n, shape, _ in layer.states()}
    params = model_names(tensors, layers)
    for i, op in enumerate(ops):
        yield i, op, shapes
        for b in bindings(op, params):
            shapes[b.name] = bound_shape(b, shapes)
        if grown(op) is not None:
            shapes[grown(op)] = grown_shape(op, shapes)


def snapshot_method(op: Mapping[str, Any]) -> MethodSpec | None:
    """The snapshot method ``op`` uses, if it takes one."""
    for f in spec(op).fields:
        if f.kind == "choice" and f.choices is METHODS:
            return METHODS_BY_NAME.get(op[f.name])
    return None


def label(op: Mapping[str, Any]) -> str:
    """The op as findings name it: its kind with its salient field (``step:adam``, ``write:row``)."""
    s = spec(op)
    return s.label(op) if s.label else s.kind


def signature_class(op: Mapping[str, Any]) -> str:
    """The coarse op kind verdict and identity signatures use (see ``OpSpec``)."""
    s = spec(op)
    return s.signature_class(op) if s.signature_class else s.kind


def defaults(kind: str, op: Mapping[str, Any]) -> dict[str, Any]:
    """The optional fields of an op of ``kind`` with the values loading fills in, ``Derived``
    ones computed from ``op`` (which must hold the fields they depend on)."""
    out = {}
    for f in OPS[kind].fields:
        if f.required:
            continue
        out[f.name] = f.default.compute(op) if isinstance(f.default, Derived) else f.default
    return out


def with_field(op: Mapping[str, Any], name: str, value: Any) -> dict[str, Any]:
    """``op`` with field ``name`` set to ``value`` and its derived fields recomputed."""
    out = {**op, name: value}
    for f in spec(op).fields:
        if isinstance(f.default, Derived) and f.default.depends_on == name:
            out[f.name] = f.default.compute(out)
    return out


def field_cost(f: Field, value: Any) -> float:
    """How far a field's value is from its simplest: the minimizer's ordering of equal cases."""
    if f.kind == "choice":
        return float(f.choices.index(value)) if f.ordered else 0.0
    if f.kind == "row":
        return float(value or 0)
    if f.kind == "values":
        return value_cost(value)
    if f.kind == "flag":
        return float(value)
    if f.kind == "number":
        return f.cost(value)
    return 0.0


def op_cost(op: Mapping[str, Any]) -> float:
    return sum(field_cost(f, op[f.name]) for f in spec(op).fields)
