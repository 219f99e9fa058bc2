"""The torch session's transcript: every torch call it makes is a line of Python source, run from
that text and recorded as run. The transcript is the reproducer (``reproducer.py`` wraps it); a
call is spelled once, in the session, and cannot drift from what the target did.

A line runs in the transcript's namespace (``ns``), where each bound case name is a variable
(``var``) and the helpers the calls need (the model, optimizers, checkpoint buffers) have names
no case variable takes (``helper``). Variables are the case's own names where Python allows it: a
keyword, a builtin or a name a helper already holds gets a trailing ``_``; a dotted name
(``bn.running_mean``, ``best.w``) becomes ``bn_running_mean``.

Invariants: a line is recorded before it runs, so a call that raises is the last line of its op;
the variable of a name never changes within a program; every object the session binds to a name
is the value of that name's variable (``TorchSession._bind`` reads it from ``ns``).
"""

from __future__ import annotations

import ast
import builtins
import copy
import io
import keyword
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import torch
from torch import nn

from harness.targets.torch import COMPILE_VARIANTS

#: What every line may use, and the source lines that import it (in the reproducer's header).
MODULES = {
    "torch": (torch, "import torch"),
    "nn": (nn, "from torch import nn"),
    "copy": (copy, "import copy"),
    "io": (io, "import io"),
}

_BUILTINS = frozenset(dir(builtins))
#: Names the reproducer's own lines use around the transcript (``reproducer.py``): no variable
#: of the transcript takes them.
SCRIPT_NAMES = frozenset(
    {"show", "check_values", "divergence", "e", "run", "label", "impl", "first", "second", "differ", "failed"}
    | {"first_failed", "second_failed", "failing", "run_plain", "run_foreach", "run_fused", "run_compile"}
    | {"run_inductor", "run_graph"}
)


@lru_cache(maxsize=4096)
def _compiled(line: str):
    return compile(line, "<transcript>", "exec")


@lru_cache(maxsize=4096)
def _compiled_expression(source: str):
    return compile(source, "<transcript>", "eval")


def run_line(line: str, ns: dict) -> None:
    """Runs one transcript line (or several) eagerly in namespace ``ns``."""
    exec(_compiled(line), ns)


#: Each compiling variant's ``torch.compile`` arguments as the source of the call's arguments.
COMPILE_ARGS = {variant: ", ".join(f"{k}={v!r}" for k, v in kw.items()) for variant, kw in COMPILE_VARIANTS.items()}
#: How many distinct compiled lines the variant keeps across programs (least recently used go).
COMPILED_LINES = 2048
#: The globals every compiled function runs in: the modules a line may use. One dict for every
#: program, because Dynamo puts each compiled graph in its function's globals.
_COMPILE_GLOBALS: dict = {name: module for name, (module, _) in MODULES.items()}


@dataclass(frozen=True)
class CompiledLine:
    """One transcript line as a compiled function: it takes the line's variables (``params``)
    and its tensor literals (``literals``: each ``torch.tensor(...)`` call, made eagerly and passed
    in as ``lifted``), and returns what the line binds (``results``, as a tuple). A program's
    namespace never enters the graph's globals.

    The function itself is ``compiled_template``'s, keyed by the line with its variables and
    literals numbered in order (``v0``, ``c0``): one compiled function serves every line that
    differs from it only in the names it uses and the values it writes. Dynamo recompiles it
    where its guards fail (another shape, dtype or aliasing of its inputs), and a constant in the
    line (a ``fill`` value, an index) is part of the key."""

    template: str  # the line with its literals lifted, as the reproducer shows it
    variant: str  # the compiling variant (``COMPILE_VARIANTS``): which backend compiled it
    function: Callable
    params: tuple[str, ...]
    lifted: tuple[str, ...]
    literals: tuple[str, ...]
    results: tuple[str, ...]

    def call(self, ns: dict) -> None:
        """Runs the function on the variables of namespace ``ns`` and the line's literals, made
        there eagerly, and binds its results there."""
        values = [eval(_compiled_expression(literal), ns) for literal in self.literals]
        out = self.function(*(ns[p] for p in self.params), *values)
        ns.update(zip(self.results, out))

    def source(self, name: str) -> list[str]:
        """The lines that define and call it as ``name``: what the reproducer shows (the same
        function as ``function``, with the line's own names)."""
        args = ", ".join(self.params + self.lifted)
        call = f"{name}({', '.join(self.params + self.literals)})"
        body = [f"    {line}" for line in self.template.splitlines()]
        lines = [f"@torch.compile({COMPILE_ARGS[self.variant]})", f"def {name}({args}):", *body]
        if self.results:
            results = ", ".join(self.results)
            return lines + [f"    return {results}", f"{results} = {call}"]
        return lines + [call]


def _is_tensor_literal(node: ast.AST) -> bool:
    """``torch.tensor(...)``: a tensor made of the line's values."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "tensor"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "torch"
    )


class _LiftLiterals(ast.NodeTransformer):
    """Replaces each tensor literal by a parameter ``<prefix><i>``, keeping its source."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.literals: list[str] = []

    def visit_Call(self, node: ast.Call) -> ast.AST:
        if _is_tensor_literal(node):
            self.literals.append(ast.unparse(node))
            return ast.Name(f"{self.prefix}{len(self.literals) - 1}", ast.Load())
        return self.generic_visit(node)


class _Rename(ast.NodeTransformer):
    def __init__(self, names: dict[str, str]) -> None:
        self.names = names

    def visit_Name(self, node: ast.Name) -> ast.Name:
        return ast.Name(self.names.get(node.id, node.id), node.ctx)


def _free_and_bound(tree: ast.Module, lifted: frozenset[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The transcript variables ``tree``'s statements read before any earlier statement of it
    binds them (its parameters), and those it binds (its results), each in order of first use.
    Straight-line code only, which a transcript is: a name read in the statement that binds it
    (``x = x + 1``) is read first. Modules, builtins and the lifted literals are no variables."""
    params: dict[str, None] = {}
    results: dict[str, None] = {}
    for statement in tree.body:
        names = [n for n in ast.walk(statement) if isinstance(n, ast.Name)]
        names = [n for n in names if n.id not in _COMPILE_GLOBALS and n.id not in _BUILTINS and n.id not in lifted]
        params |= {n.id: None for n in names if isinstance(n.ctx, ast.Load) and n.id not in results}
        results |= {n.id: None for n in names if isinstance(n.ctx, ast.Store)}
    return tuple(params), tuple(results)


@lru_cache(maxsize=COMPILED_LINES)
def compiled_line(line: str, variant: str = "compile") -> CompiledLine:
    """``line`` as a ``CompiledLine`` of ``variant`` (kept per line: a line recurs across programs, and parsing
    it is the variant's cost on every statement it runs). ``line`` may be several lines (the
    ``graph`` variant's run of ops, ``graph.py``): one function runs them all. A name the lines
    read that is no module and no builtin is a transcript variable (a variable never takes a
    builtin's name: ``_identifier``), so the parameters follow from the text alone
    (``_free_and_bound``); a name read before it is bound and bound after is both. The lifted
    literals are ``value0``, ``value1``, ... (with ``_`` added until no variable of the line
    starts so)."""
    tree = ast.parse(line)
    names = [n for n in ast.walk(tree) if isinstance(n, ast.Name)]
    prefix = "value"
    while any(n.id.startswith(prefix) for n in names):
        prefix += "_"
    lift = _LiftLiterals(prefix)
    tree = lift.visit(tree)
    lifted = tuple(f"{prefix}{i}" for i in range(len(lift.literals)))
    params, results = _free_and_bound(tree, frozenset(lifted))
    numbered = {name: f"v{i}" for i, name in enumerate(dict.fromkeys(params + results))}
    numbered |= {name: f"c{i}" for i, name in enumerate(lifted)}
    canonical = ast.unparse(_Rename(numbered).visit(ast.parse(ast.unparse(tree))))
    function = compiled_template(
        canonical,
        tuple(numbered[p] for p in params) + tuple(numbered[c] for c in lifted),
        tuple(numbered[r] for r in results),
        variant,
    )
    return CompiledLine(ast.unparse(tree), variant, function, params, lifted, tuple(lift.literals), results)


@lru_cache(maxsize=COMPILED_LINES)
def compiled_template(
    template: str, args: tuple[str, ...], results: tuple[str, ...], variant: str = "compile"
) -> Callable:
    """The compiled function of a line with its variables and literals numbered
    (``compiled_line``), compiled as ``variant`` compiles: one per template and variant for the
    probe's life, ``COMPILED_LINES`` at most (``cache_info`` counts the templates compiled,
    ``misses``, and reused, ``hits``)."""
    body = "".join(f"    {line}\n" for line in template.splitlines())
    source = f"def compiled({', '.join(args)}):\n{body}    return ({''.join(f'{r}, ' for r in results)})\n"
    space: dict = {}
    exec(compile(source, "<compiled transcript line>", "exec"), _COMPILE_GLOBALS, space)
    return torch.compile(space["compiled"], **COMPILE_VARIANTS[variant])


def _identifier(text: str) -> str:
    """``text`` as a Python identifier that shadows nothing: dots become ``_``, a keyword or a
    builtin gets a trailing ``_``."""
    ident = text.replace(".", "_")
    if keyword.iskeyword(ident) or keyword.issoftkeyword(ident) or ident in _BUILTINS:
        ident += "_"
    return ident


def literal(x) -> str:
    """A float, or a nested list of them, as Python source that gives the same values."""
    if isinstance(x, (list, tuple)):
        return "[" + ", ".join(literal(y) for y in x) + "]"
    x = float(x)
    if math.isnan(x):
        return 'float("nan")'
    if math.isinf(x):
        return 'float("inf")' if x > 0 else '-float("inf")'
    return repr(x)


def nested(values: list, shape: list[int]):
    """The flat ``values`` as nested lists of ``shape`` (a scalar for shape ``[]``)."""
    if not shape:
        return values[0]
    step = len(values) // shape[0] if shape[0] else 0
    return [
        nested(values[i * step : (i + 1) * step], shape[1:]) if len(shape) > 1 else values[i] for i in range(shape[0])
    ]


class Transcript:
    """The lines one program ran, op by op, and the namespace they ran in."""

    def __init__(self) -> None:
        self.ns: dict = {name: module for name, (module, _) in MODULES.items()}
        self.prologue: list[str] = []
        self.ops: list[list[str]] = []
        self._lines = self.prologue
        self.names: dict[str, str] = {}  # case name -> its variable
        self._taken: set[str] = set(self.ns) | SCRIPT_NAMES
        #: The compiling variant ``run`` compiles its lines as, or None: eager (a compiling
        #: variant sets it per op).
        self.compiling: str | None = None

    def begin_op(self) -> None:
        """The lines from here on are the next op's."""
        self._lines = []
        self.ops.append(self._lines)

    def run(self, line: str) -> None:
        """Records ``line``, then runs it (an exception propagates: the line stays, the op's last).
        While ``compiling``, the line runs as a ``torch.compile``d function of its variables, and
        the lines recorded define and call that function (``CompiledLine.source``)."""
        if self.compiling:
            self._run_compiled(line)
            return
        self._lines.append(line)
        run_line(line, self.ns)

    def _run_compiled(self, line: str) -> None:
        fn = compiled_line(line, self.compiling)
        self._lines.extend(fn.source(self.helper("compiled")))
        fn.call(self.ns)

    @property
    def current(self) -> list[str]:
        """The lines recorded so far for the op running now (the prologue's before the first op)."""
        return self._lines

    def var(self, name: str) -> str:
        """The variable of the case name ``name`` (given on its first use, kept after): the name
        itself where it is free, else with ``_`` appended until it is."""
        ident = self.names.get(name)
        if ident is None:
            ident = _identifier(name)
            while ident in self._taken:
                ident += "_"
            self._taken.add(ident)
            self.names[name] = ident
        return ident

    def helper(self, base: str) -> str:
        """A new variable for something that is not a case name: ``base``, else ``base2``, ..."""
        base = _identifier(base)
        ident, n = base, 2
        while ident in self._taken:
            ident, n = f"{base}{n}", n + 1
        self._taken.add(ident)
        return ident

    def value(self, name: str):
        """What the variable of ``name`` holds now."""
        return self.ns[self.names[name]]

    def to_json(self) -> dict:
        """The transcript as the protocol's ``transcript`` field (``PROTOCOL.md``)."""
        return {"prologue": list(self.prologue), "ops": [list(lines) for lines in self.ops], "names": dict(self.names)}
