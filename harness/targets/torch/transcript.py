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

import builtins
import copy
import io
import keyword
import math
from functools import lru_cache

import torch
from torch import nn

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
    {"show", "check_values", "divergence", "e", "run", "label", "impl", "first", "second", "differ"}
)


@lru_cache(maxsize=4096)
def _compiled(line: str):
    return compile(line, "<transcript>", "exec")


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

    def begin_op(self) -> None:
        """The lines from here on are the next op's."""
        self._lines = []
        self.ops.append(self._lines)

    def run(self, line: str) -> None:
        """Records ``line``, then runs it (an exception propagates: the line stays, the op's last)."""
        self._lines.append(line)
        exec(_compiled(line), self.ns)

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
