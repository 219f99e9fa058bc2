"""Checks of raw input: the files aliasfuzz reads (cases, baselines) and the values a case
carries, shared by case files (``harness.case.case_file.parse_case``) and by programs built in code
(``harness.case.ir.check_program``), so both refuse the same inputs.

Every number a case gives ends up as a float32 in each framework, and is sent to the targets as
JSON, which has no NaN or infinity: a value that is not a finite float32 would make every target
answer a protocol error (or overflow in its conversion), and the oracle would see no divergence.
So a number is accepted only when float32 holds it finitely.

Each value check takes ``where`` (the location to name, e.g. ``tensors.w.value``) and ``err``, a
callable ``err(where, message) -> Exception`` that the check raises; messages are one line.
"""

from __future__ import annotations

import math
import os
import re
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):  # noqa: UP036 - tomli where tomllib is missing, as the project promises
    import tomllib
else:  # pragma: no cover - the project runs on 3.11, tomli keeps 3.10 working
    import tomli as tomllib

from harness.case.methods import bf16_rounded
from harness.errors import InputError

#: A name: an identifier, ``<layer>.<stat>`` for a layer's running statistic, or ``<prefix>.<name>``
#: for what ``module_clone`` and ``save`` bind (``<prefix>.<layer>.<stat>``: two dots). Always
#: matched with ``fullmatch``: ``$`` would also match before a final newline, and ``"p0\n"`` would pass.
NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*){0,2}")


def is_identifier(name: Any) -> bool:
    """A name a case may bind itself (a tensor or snapshot): letters, digits, '_', no dot."""
    return isinstance(name, str) and NAME_RE.fullmatch(name) is not None and "." not in name


#: The largest finite float32 (``numpy.finfo(numpy.float32).max``). A larger magnitude rounds to
#: infinity, and torch refuses such a scalar ("cannot be converted to type float without
#: overflow"), so it is refused here whatever the rounding would give.
FLOAT32_MAX = 3.4028234663852886e38

#: Tensors are rank 1 to 3; nested lists deeper than this are refused before they are walked,
#: so a deeply nested value never reaches Python's recursion limit.
MAX_RANK = 3

#: Seeds go to the targets as u64 (the probe protocol's ``seed: Option<u64>``).
MAX_SEED = 2**64 - 1

#: Largest file read: a 4096-element tensor (the most a case may declare) takes about 80 KB of
#: TOML, the bundled baseline 8 KB; and a path such as /dev/zero must not be read until memory
#: runs out.
MAX_FILE_BYTES = 1 << 20

#: How deep ``meta`` (free text for people) may nest: TOML writers and JSON encoders recurse.
MAX_META_DEPTH = 16

Err = Callable[[str, str], Exception]


def is_number(x: Any) -> bool:
    """An int or float that is not a bool (TOML ``true`` is a bool, not 1)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def clip(text: str, limit: int = 120) -> str:
    """``text`` cut to ``limit`` characters, ``...`` marking the cut."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def brief(x: Any, limit: int = 60) -> str:
    """``repr(x)``, clipped: messages echo user values (which may be huge) and stay short."""
    return clip(repr(x), limit)


def f32(x: Any, where: str, err: Err) -> float:
    """``x`` as a float, when it is a number that float32 holds finitely."""
    if _plain(x):
        return x
    if not is_number(x):
        raise err(where, f"expected a finite number, got {brief(x)}")
    # An int beyond float's range would raise OverflowError in float(); compare it exactly.
    if isinstance(x, int) and abs(x) > FLOAT32_MAX:
        raise err(where, f"outside float32's finite range (magnitude at most {FLOAT32_MAX!r}), got {brief(x)}")
    value = float(x)
    if not math.isfinite(value):
        raise err(where, f"must be a finite number, got {value!r}")
    if abs(value) > FLOAT32_MAX:
        raise err(where, f"outside float32's finite range (magnitude at most {FLOAT32_MAX!r}), got {value!r}")
    return value


def flatten(value: Any, where: str, err: Err) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """Nested lists of numbers -> (shape, flat row-major floats). Refuses empty or ragged lists,
    nesting deeper than ``MAX_RANK`` and numbers that are not finite float32 values; a bad
    element is named by its index (``tensors.w.value[1][0]``)."""
    return _flatten(value, where, err, 0)


def _plain(x: Any) -> bool:
    """A float that needs no conversion and is a finite float32 (NaN fails both comparisons).
    The common case, tested first: every program the generator draws passes through here."""
    return type(x) is float and -FLOAT32_MAX <= x <= FLOAT32_MAX


def _flatten(value: Any, where: str, err: Err, depth: int) -> tuple[tuple[int, ...], tuple[float, ...]]:
    if isinstance(value, list) and value and depth < MAX_RANK and all(_plain(v) for v in value):
        return (len(value),), tuple(value)  # a row of plain floats: no location strings to build
    if not isinstance(value, list):
        if not is_number(value):
            raise err(where, f"expected a number or a non-empty (nested) list of numbers, got {brief(value)}")
        return (), (f32(value, where, err),)
    if depth == MAX_RANK:
        raise err(where, f"rank must be 1 to {MAX_RANK}: nested more than {MAX_RANK} lists deep")
    if not value:
        raise err(where, "expected a number or a non-empty (nested) list of numbers, got []")
    parts = [_flatten(v, f"{where}[{i}]", err, depth + 1) for i, v in enumerate(value)]
    inner = parts[0][0]
    if any(p[0] != inner for p in parts):
        raise err(where, "ragged nested list: rows have different shapes")
    flat: list[float] = []
    for p in parts:
        flat.extend(p[1])
    return (len(value),) + inner, tuple(flat)


def flat_values(values: Any, count: int, where: str, err: Err) -> None:
    """Checks a flat sequence of ``count`` numbers (a ``TensorDecl``'s value or grad built in
    code): each a finite float32, named by its flat index."""
    if not isinstance(values, (tuple, list)) or len(values) != count:
        got = len(values) if isinstance(values, (tuple, list)) else brief(values)
        raise err(where, f"expected {count} numbers (the shape's element count), got {got}")
    for i, x in enumerate(values):
        if not _plain(x):
            f32(x, f"{where}[{i}]", err)


def exact_in(dtype: str, values: Any, where: str, err: Err) -> None:
    """Refuses a value of ``values`` (finite float32s, flat) that ``dtype`` does not hold
    exactly, named by its flat index: each framework rounds such a value on its own path
    (torch from a double, candle and burn from a float32), so a case states only values that
    need no rounding, and every target starts from the same tensors."""
    if dtype == "f32":
        return
    import numpy as np

    a = np.asarray(values, dtype=np.float32)
    if dtype == "f16":
        with np.errstate(over="ignore"):
            held = a.astype(np.float16).astype(np.float32)
    else:
        held = bf16_rounded(a)
    bad = np.flatnonzero(held != a)
    if bad.size:
        i = int(bad[0])
        raise err(
            f"{where}[{i}]",
            f"{float(a.flat[i])!r} is not exact in {dtype} (the case's dtype): "
            f"it would round to {float(held.flat[i])!r}",
        )


def seed(x: Any, where: str, err: Err) -> int:
    """A seed: an integer in 0..2**64-1."""
    if not isinstance(x, int) or isinstance(x, bool) or not 0 <= x <= MAX_SEED:
        raise err(where, f"must be an integer in 0..{MAX_SEED}, got {brief(x)}")
    return x


def shallow(value: Any, where: str, err: Err, limit: int = MAX_META_DEPTH) -> None:
    """Refuses tables and arrays nested more than ``limit`` deep (walked without recursion)."""
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth >= limit:
            raise err(where, f"nested more than {limit} levels deep")
        stack.extend((child, depth + 1) for child in children)


def one_line(text: str) -> str:
    """``text`` with every character that would break or hide a line (newlines, other control
    and separator characters) written as its Python escape: an error message stays one line
    whatever names or paths it quotes."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def guarded(where: str, err: Err, check: Callable[..., Any], *args: Any) -> Any:
    """``check(*args)``, with any exception but an ``InputError`` (a check's own one-line error)
    turned into ``err(where, ...)``: a malformed input that no check foresaw is still refused
    with one line naming the file and the place, never a traceback."""
    try:
        return check(*args)
    except InputError:
        raise
    except Exception as e:  # RecursionError, TypeError, ... from input shaped like nothing known
        raise err(where, f"malformed ({type(e).__name__}: {clip(str(e))})") from None


def read_toml(path: str | Path, error: Callable[[str], Exception]) -> dict[str, Any]:
    """The TOML document in the file at ``path``. Raises ``error(message)`` (a one-line
    ``InputError``) for a path that cannot be read, is not a regular file (a directory, a FIFO,
    a device), holds more than ``MAX_FILE_BYTES``, or is not UTF-8 TOML."""
    path = Path(path)
    try:
        # stat before opening: opening a FIFO blocks until a writer comes, and a device such
        # as /dev/zero is never read to its end.
        mode = os.stat(path).st_mode
    except (OSError, ValueError) as e:  # ValueError: a path with a NUL byte
        raise error(f"cannot read: {_why(e)}") from None
    if not stat.S_ISREG(mode):
        raise error(f"not a regular file ({_file_kind(mode)})")
    try:
        # O_NONBLOCK: should the path be replaced by a FIFO after the stat, open still returns
        # at once (and fstat refuses it); on a regular file it changes nothing.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            # One byte more than allowed tells a file that is too large from one that fits.
            data = f.read(MAX_FILE_BYTES + 1) if stat.S_ISREG(mode) else None
    except (OSError, ValueError) as e:
        raise error(f"cannot read: {_why(e)}") from None
    if data is None:
        raise error(f"not a regular file ({_file_kind(mode)})")
    if len(data) > MAX_FILE_BYTES:
        raise error(f"larger than {MAX_FILE_BYTES >> 20} MiB: too large for a file aliasfuzz reads")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise error("not UTF-8 text") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise error(f"invalid TOML: {e}") from None
    except RecursionError:  # tomllib reads nested arrays and inline tables recursively
        raise error("invalid TOML: nested too deeply") from None


def _why(e: Exception) -> str:
    return (e.strerror if isinstance(e, OSError) and e.strerror else None) or str(e)


def _file_kind(mode: int) -> str:
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "not a plain file")
