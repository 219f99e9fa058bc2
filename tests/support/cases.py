"""Case files the input tests share: bad ones, and one full of hostile text."""

from __future__ import annotations

import json

HEADER = 'format = "aliasfuzz-case/1"\n[tensors]\nw = { kind = "param", value = [[1.0, 2.0]] }\n'


# (case text, the location the message must name, a fragment of the message)
BAD_CASES = {
    "bad_toml": ('format = "aliasfuzz-case/1"\n[tensors\n', "", "invalid TOML"),
    "wrong_format": (
        'format = "aliasfuzz-case/9"\n[tensors]\nw = { kind = "param", value = [1.0] }\n',
        "format",
        "must be",
    ),
    "no_tensors": ('format = "aliasfuzz-case/1"\n', "tensors", "missing"),
    "bad_kind": (
        'format = "aliasfuzz-case/1"\n[tensors]\nw = { kind = "weight", value = [1.0] }\n',
        "tensors.w.kind",
        "must be one of",
    ),
    "ragged_value": (
        'format = "aliasfuzz-case/1"\n[tensors]\nw = { kind = "param", value = [[1.0], [1.0, 2.0]] }\n',
        "tensors.w.value",
        "ragged",
    ),
    "rank_4": (
        'format = "aliasfuzz-case/1"\n[tensors]\nw = { kind = "param", value = [[[[1.0]]]] }\n',
        "tensors.w.value",
        "rank",
    ),
    "grad_shape": (
        'format = "aliasfuzz-case/1"\n[tensors]\nw = { kind = "param", value = [1.0, 2.0], grad = [1.0] }\n',
        "tensors.w.grad",
        "shape",
    ),
    "unknown_op": (HEADER + '[[ops]]\nop = "explode"\n', "ops[0].op", "unknown op"),
    "unknown_name": (
        HEADER + '[[ops]]\nop = "snapshot"\nname = "s"\nof = "nope"\nmethod = "clone"\n',
        "ops[0].of",
        "no tensor named",
    ),
    "unknown_method": (
        HEADER + '[[ops]]\nop = "snapshot"\nname = "s"\nof = "w"\nmethod = "photocopy"\n',
        "ops[0].method",
        "unknown method",
    ),
    "missing_field": (HEADER + '[[ops]]\nop = "snapshot"\nname = "s"\nof = "w"\n', "ops[0].method", "missing"),
    "unknown_field": (
        HEADER + '[[ops]]\nop = "fill"\ntarget = "w"\nvalue = 1.0\ncolour = "red"\n',
        "ops[0].colour",
        "unknown field",
    ),
    "shape_mismatch": (
        HEADER + '[[ops]]\nop = "write"\ntarget = "w"\nindex = 0\nvalue = [1.0, 2.0, 3.0]\n',
        "ops[0].value",
        "does not match",
    ),
    "index_out_of_range": (
        HEADER + '[[ops]]\nop = "write"\ntarget = "w"\nindex = 5\nvalue = [1.0, 2.0]\n',
        "ops[0].index",
        "integer in",
    ),
    "rebound_name": (
        HEADER + '[[ops]]\nop = "snapshot"\nname = "w"\nof = "w"\nmethod = "clone"\n',
        "ops[0].name",
        "already bound",
    ),
    "transpose_rank1": (
        'format = "aliasfuzz-case/1"\n[tensors]\nw = { kind = "param", value = [1.0] }\n[[ops]]\nop = "snapshot"\nname = "s"\nof = "w"\nmethod = "transpose"\n',
        "ops[0].method",
        "rank 2",
    ),
    "move_buffer": (
        'format = "aliasfuzz-case/1"\n[tensors]\nb = { kind = "buffer", value = [1.0] }\n[[ops]]\nop = "move"\ntarget = "b"\ndevice = "cpu"\n',
        "ops[0].target",
        "takes a param",
    ),
    "bad_optimizer": (
        HEADER + '[[ops]]\nop = "step"\noptimizer = "lion"\nlr = 0.1\n',
        "ops[0].optimizer",
        "unknown optimizer",
    ),
    "negative_lr": (HEADER + '[[ops]]\nop = "step"\noptimizer = "sgd"\nlr = -1.0\n', "ops[0].lr", "positive"),
    "lazy_without_init": (
        'format = "aliasfuzz-case/1"\n[tensors]\nl = { kind = "lazy", shape = [2] }\n',
        "tensors.l.init",
        "must be one of",
    ),
    "bad_device": (HEADER + '[[ops]]\nop = "move"\ntarget = "w"\ndevice = "tpu"\n', "ops[0].device", "unknown device"),
}


#: A payload each language would run if the text left its comment, docstring or literal.
MARKER_NAME = "INJECTED-MARKER"


PY_PAYLOAD = f"import pathlib; pathlib.Path({MARKER_NAME!r}).write_text('x'); raise SystemExit(99)"


RS_PAYLOAD = "fn injected_by_aliasfuzz_text() {}"


HOSTILE = (
    f"title \"\"\"\n{PY_PAYLOAD}\n\"\"\" '''\n{PY_PAYLOAD}\n''' */ /* \r{RS_PAYLOAD}\r\n{RS_PAYLOAD}\u2028"
    f'{RS_PAYLOAD}\u2029 back\\slash \\" \u202e\x1b[31m red <script>alert(1)</script>'
)


# A case whose names are legal but awkward: `class` (a Python keyword, the target of a replace),
# `c_w` beside the `c.w` a save named `c` binds (one Rust variable before), `fn` (a Rust keyword).
HOSTILE_CASE = f"""format = "aliasfuzz-case/1"
title = {json.dumps(HOSTILE)}

[tensors]
w = {{ kind = "param", value = [1.0, 2.0] }}
class = {{ kind = "param", value = [3.0, 4.0] }}
c_w = {{ kind = "buffer", value = [5.0, 6.0] }}
fn = {{ kind = "buffer", value = [7.0, 8.0] }}

[[ops]]
op = "snapshot"
name = "s"
of = "w"
method = "detach"

[[ops]]
op = "replace"
target = "class"
value = "w"
how = "new"

[[ops]]
op = "save"
name = "c"

[[ops]]
op = "scale"
target = "fn"
factor = 2.0
"""
