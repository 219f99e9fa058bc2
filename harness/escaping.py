"""Text from a case, a finding or a store, written into code or a document as text, never as code.

A case's ``title``, a target's error message, a finding's sentence or detail and every name come
from outside: a user's case file, a probe's answer, another machine of a shared campaign. What
writes them into a generated file or onto a terminal goes through one function here per place it
lands:

- Python source: ``python_str`` (a literal), ``python_docstring`` (the body of a ``\"\"\"`` string),
  ``python_comment`` (``#`` lines);
- Rust source: ``rust_str`` (a literal, not a format string), ``rust_comment`` (``//`` or ``//!``
  lines);
- TOML (a generated Cargo.toml): ``toml_str``;
- Markdown that may be rendered with HTML on: ``md_text`` (inline text, also in a table cell),
  ``md_code`` (a code span), ``md_fence`` (a fenced block);
- a terminal: ``visible`` (one line; every control character written as its escape).

Each gives the text back unchanged where it can (a literal's value, a comment's words); what it
cannot hold is written as an escape (``\\n``, ``\\x1b``, ``\\u2028``): a line break, a control
character (an ANSI sequence), a bidirectional override (Rust refuses those in comments and
literals), a lone surrogate (no UTF-8 file holds one).
"""

from __future__ import annotations

import html
import re
from typing import Any

from harness.case.values import one_line

__all__ = [
    "comment_text",
    "md_code",
    "md_fence",
    "md_text",
    "python_comment",
    "python_docstring",
    "python_str",
    "rust_comment",
    "rust_str",
    "toml_str",
    "visible",
]


def visible(text: Any) -> str:
    """``text`` (any value, as ``str``) on one line with every character that is not printable
    (line breaks, ANSI escapes, bidirectional overrides, lone surrogates) written as its Python
    escape: what a terminal prints of stored data, and the words of one comment line."""
    return one_line(str(text))


def comment_text(text: Any) -> list[str]:
    """The lines of ``text`` as a comment holds them, in any language: split at every line break
    any reader may see (``\\n``, ``\\r``, U+2028, ...), a tab made a space, what is left that is
    not printable escaped. A comment writer prefixes every one (``python_comment``, ``rust_comment``)."""
    return [visible(line.replace("\t", " ")) for line in str(text).splitlines()] or [""]


def _comment(prefix: str, text: Any) -> list[str]:
    return [f"{prefix} {line}".rstrip() for line in comment_text(text)]


# ------------------------------------------------------------------------------------------------
# Python.


def python_str(text: Any) -> str:
    """A Python string literal whose value is ``text`` (``repr``: it escapes quotes, backslashes,
    line breaks and every character that is not printable)."""
    return repr(str(text))


def python_docstring(text: Any) -> str:
    """The body of a ``\"\"\"`` string whose value is ``text``: backslashes and double quotes
    escaped (so nothing in it ends the string), ``\\n`` kept as a line break, every other character
    that is not printable written as its escape."""
    out = []
    for c in str(text):
        if c in '\\"':
            out.append("\\" + c)
        elif c == "\n" or c.isprintable():
            out.append(c)
        else:
            out.append(visible(c))
    return "".join(out)


def python_comment(text: Any, prefix: str = "#") -> list[str]:
    """``text`` as comment lines, each starting with ``prefix``. Never put one on a file's first
    two lines: a comment there may declare the source encoding (PEP 263)."""
    return _comment(prefix, text)


# ------------------------------------------------------------------------------------------------
# Rust.

_RUST_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t", "\0": "\\0"}


def _rust_char(c: str) -> str:
    if c in _RUST_ESCAPES:
        return _RUST_ESCAPES[c]
    if c.isprintable():
        return c
    if 0xD800 <= ord(c) <= 0xDFFF:  # a lone surrogate: no Rust char is one
        return "\\u{fffd}"
    return f"\\u{{{ord(c):x}}}"


def rust_str(text: Any) -> str:
    """A Rust string literal whose value is ``text`` (a lone surrogate becomes U+FFFD). Not for a
    ``format!``/``println!`` format string, where braces are placeholders."""
    return '"' + "".join(_rust_char(c) for c in str(text)) + '"'


def rust_comment(text: Any, prefix: str = "//") -> list[str]:
    """``text`` as comment lines, each starting with ``prefix`` (``//``, ``//!``, indented or not):
    no line break or bare carriage return (refused in a doc comment) and no bidirectional
    override (refused by rustc's ``text_direction_codepoint_in_comment``) is left in them."""
    return _comment(prefix, text)


# ------------------------------------------------------------------------------------------------
# TOML.


def _toml_char(c: str) -> str:
    if c in '\\"':
        return "\\" + c
    if c.isprintable():
        return c
    if 0xD800 <= ord(c) <= 0xDFFF:  # TOML holds Unicode scalar values only
        return "\\uFFFD"
    return f"\\u{ord(c):04X}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08X}"


def toml_str(text: Any) -> str:
    """A TOML basic string whose value is ``text`` (``json.dumps`` is not one: it writes a
    character outside the BMP as a surrogate pair, which TOML refuses)."""
    return '"' + "".join(_toml_char(c) for c in str(text)) + '"'


# ------------------------------------------------------------------------------------------------
# Markdown (rendered by GitHub or any renderer with HTML on).

#: Characters that start Markdown inline syntax anywhere in a line (GFM: ``~`` strikethrough, ``|``
#: a table cell), and a ``_`` but between two letters or digits (where CommonMark never reads it as
#: emphasis: ``original_case`` stays as written). ``<``, ``>`` and ``&`` are written as HTML
#: entities instead. A backtick is left as it is: the harness's own sentences mark code with them,
#: and a code span renders its content literally (it holds no HTML, and a ``|`` in it is escaped).
_MD_INLINE = re.compile(r"([\\*\[\]|~!]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")
#: What makes a line a heading, a list item, a quote or a thematic break where it starts one.
_MD_LINE_START = re.compile(r"^(\s*)([#+\-=]|\d+(?=[.)]))")


def md_text(text: Any) -> str:
    """``text`` as inline Markdown that renders as exactly that text: one line (runs of white space,
    line breaks among them, become one space), HTML written as entities, Markdown punctuation but
    backticks backslash-escaped, control characters written as their escapes. Safe in a table
    cell: no element, link or image comes from ``text``."""
    flat = visible(" ".join(str(text).split()))
    escaped = _MD_INLINE.sub(r"\\\1", html.escape(flat, quote=False))
    return _MD_LINE_START.sub(
        lambda m: m.group(1) + ("\\" + m.group(2) if not m.group(2).isdigit() else m.group(2) + "\\"), escaped, count=1
    )


def _longest_backtick_run(text: str) -> int:
    return max((len(r) for r in re.findall(r"`+", text)), default=0)


def md_code(text: Any) -> str:
    """``text`` as a code span: one line, control characters escaped, delimited by more backticks
    than any run inside it (padded with a space where it starts or ends with one). A ``|`` is
    written ``\\|``: GitHub splits a table row at a bare one even inside a code span, and renders
    the escaped one as ``|``."""
    flat = visible(" ".join(str(text).split())).replace("|", "\\|")
    ticks = "`" * (_longest_backtick_run(flat) + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") else ""
    return f"{ticks}{pad}{flat}{pad}{ticks}"


def md_fence(text: Any, lang: str = "") -> list[str]:
    """``text`` as a fenced code block: the fence longer than any backtick run inside, every
    character that is not printable written as its escape but for line breaks and tabs (a bare
    ``\\r`` or U+2028 would be a line ending to some renderer, an ANSI sequence would reach the
    terminal of whoever reads the file)."""
    body = "\n".join(
        "".join(c if c == "\t" or c.isprintable() else visible(c) for c in line)
        for line in str(text).rstrip().replace("\r\n", "\n").split("\n")
    )
    ticks = "`" * max(3, _longest_backtick_run(body) + 1)
    return [ticks + lang, body, ticks]
