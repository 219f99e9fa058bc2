"""Hostile input: every malformed case, program or baseline is refused before anything runs, with
one line naming the file and the field (exit status 2 on the command line), never a traceback,
a hang or a run that quietly checks nothing.

Cases and baselines are real files; where the command line is involved it runs in a real
process (``tests.conftest.run_cli_in_process``), on ``torch:cpu``, which needs no Rust probe.

The tests here run in this process (the command line through ``run_cli_in_process``), as the
unit tier requires; those that need real processes are in tests/e2e/test_input_validation.py.
"""

from __future__ import annotations

import json
import math
import os
import tomllib
from pathlib import Path

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.case.case_file import FORMAT, dump_case, load_case, parse_case
from harness.case.ir import CaseError, TensorDecl, check_program
from harness.case.ops import LAZY_INITS, METHODS, OP_KINDS, OPS, OPTIMIZERS, TENSOR_KINDS
from harness.errors import InputError
from tests.conftest import CASES, run_cli_in_process
from tests.support.input_validation import one_line_exit_2, refused

HEADER = 'format = "aliasfuzz-case/1"\n[tensors]\nw = { kind = "param", value = [1.0, 2.0] }\n'
GOOD_CASE = CASES / "example_sgd_snapshots.toml"


# -- 1. numbers: finite float32 only --------------------------------------------------------------


def _step(field: str) -> str:
    return HEADER + f'[[ops]]\nop = "step"\noptimizer = "adamw"\nlr = 0.1\n{field}\n'


# (case text, field the message must name, fragment)
NON_FINITE = {
    "value_nan": (HEADER.replace("2.0]", "nan]"), "tensors.w.value[1]", "must be a finite number"),
    "value_nested_inf": (HEADER.replace("[1.0, 2.0]", "[[1.0], [-inf]]"), "tensors.w.value[1][0]", "finite"),
    "grad_inf": (HEADER.replace("2.0] }", "2.0], grad = [inf, 1.0] }"), "tensors.w.grad[0]", "finite"),
    "lazy_fill_nan": (
        'format = "aliasfuzz-case/1"\n[tensors]\nl = { kind = "lazy", shape = [2], init = "const", fill = nan }\n',
        "tensors.l.fill",
        "finite",
    ),
    "write_value_nan": (
        HEADER + '[[ops]]\nop = "write"\ntarget = "w"\nvalue = [1.0, nan]\n',
        "ops[0].value[1]",
        "finite",
    ),
    "write_row_inf": (
        HEADER.replace("[1.0, 2.0]", "[[1.0, 2.0]]") + '[[ops]]\nop = "write"\ntarget = "w"\nindex = 0\n'
        "value = [inf, 1.0]\n",
        "ops[0].value[0]",
        "finite",
    ),
    "fill_nan": (HEADER + '[[ops]]\nop = "fill"\ntarget = "w"\nvalue = nan\n', "ops[0].value", "finite"),
    "scale_inf": (HEADER + '[[ops]]\nop = "scale"\ntarget = "w"\nfactor = -inf\n', "ops[0].factor", "finite"),
    "lr_nan": (HEADER + '[[ops]]\nop = "step"\noptimizer = "sgd"\nlr = nan\n', "ops[0].lr", "finite"),
    "betas_nan": (_step("betas = [0.9, nan]"), "ops[0].betas[1]", "finite"),
    "eps_inf": (_step("eps = inf"), "ops[0].eps", "finite"),
    "weight_decay_nan": (_step("weight_decay = nan"), "ops[0].weight_decay", "finite"),
    "momentum_nan": (
        HEADER + '[[ops]]\nop = "step"\noptimizer = "sgd_momentum"\nlr = 0.1\nmomentum = nan\n',
        "ops[0].momentum",
        "finite",
    ),
    # Finite in float64 but not in float32: they overflowed to infinity (with a numpy warning).
    "lr_1e300": (HEADER + '[[ops]]\nop = "step"\noptimizer = "sgd"\nlr = 1e300\n', "ops[0].lr", "float32"),
    "value_1e39": (HEADER.replace("2.0]", "1e39]"), "tensors.w.value[1]", "float32"),
    "fill_minus_1e39": (HEADER + '[[ops]]\nop = "fill"\ntarget = "w"\nvalue = -1e39\n', "ops[0].value", "float32"),
    "grad_int_2_to_128": (
        HEADER.replace("2.0] }", "2.0], grad = [1, 340282366920938463463374607431768211456] }"),
        "tensors.w.grad[1]",
        "float32",
    ),
}


@pytest.mark.parametrize("name", sorted(NON_FINITE))
def test_a_number_that_is_not_a_finite_float32_is_refused_naming_the_field(tmp_path: Path, name: str):
    text, where, fragment = NON_FINITE[name]
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    refused(path, where, fragment)


def test_the_largest_float32_is_accepted_and_the_next_double_is_not(tmp_path: Path):
    path = tmp_path / "edge.toml"
    path.write_text(HEADER.replace("2.0]", "3.4028234663852886e38]"))
    assert load_case(path).tensors[0].value == (1.0, 3.4028234663852886e38)
    path.write_text(HEADER.replace("2.0]", "3.4028234663852890e38]"))
    refused(path, "tensors.w.value[1]", "float32")


@pytest.mark.parametrize("name", ["value_nan", "lazy_fill_nan", "lr_1e300"])
def test_cli_refuses_a_non_finite_number_instead_of_reporting_no_divergence(tmp_path: Path, name: str):
    # Before: every target answered "NaN is not JSON", and repro said "No divergence." (exit 0).
    text, where, _ = NON_FINITE[name]
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    one_line_exit_2(run_cli_in_process("repro", str(path), "--targets", "torch:cpu", timeout=120), str(path), where)


W = TensorDecl("w", "param", (2,), (1.0, 2.0))


@pytest.mark.parametrize(
    "tensors, ops, where",
    [
        ([TensorDecl("w", "param", (2,), (1.0, math.nan))], [], "tensors.w.value[1]"),
        ([TensorDecl("w", "param", (2,), (1.0, 2.0), (math.inf, 1.0))], [], "tensors.w.grad[0]"),
        ([TensorDecl("w", "param", (2,), (1.0, 1e39))], [], "tensors.w.value[1]"),
        ([TensorDecl("l", "lazy", (2,), init="const", fill=math.nan)], [], "tensors.l.fill"),
        ([TensorDecl("w", "param", (2,), (1.0,))], [], "tensors.w.value"),  # fewer values than the shape
        ([W], [{"op": "fill", "target": "w", "value": math.inf}], "ops[0].value"),
        ([W], [{"op": "write", "target": "w", "index": None, "value": [0.0, math.nan]}], "ops[0].value[1]"),
        (
            [W],
            [
                {
                    "op": "step",
                    "optimizer": "adam",
                    "lr": 1e300,
                    "momentum": 0.0,
                    "betas": [0.9, 0.999],
                    "eps": 1e-8,
                    "weight_decay": 0.0,
                }
            ],
            "ops[0].lr",
        ),
        (
            [W],
            [
                {
                    "op": "step",
                    "optimizer": "adam",
                    "lr": 0.1,
                    "momentum": 0.0,
                    "betas": [0.9, math.nan],
                    "eps": 1e-8,
                    "weight_decay": 0.0,
                }
            ],
            "ops[0].betas[1]",
        ),
    ],
    ids=[
        "value_nan",
        "grad_inf",
        "value_1e39",
        "lazy_fill_nan",
        "short_value",
        "fill_inf",
        "write_nan",
        "lr_1e300",
        "betas_nan",
    ],
)
def test_check_program_applies_the_same_checks_to_programs_built_in_code(tensors, ops, where):
    # The generator, the minimizer and the corpus build programs without a case file.
    with pytest.raises(CaseError) as info:
        check_program(tuple(tensors), ops)
    assert f": {where}: " in str(info.value) and "\n" not in str(info.value)


def test_a_corpus_entry_with_nan_is_refused_when_read_back():
    from harness.fuzzing.run_folder import program_from_bytes, program_to_bytes

    good = load_case(GOOD_CASE)
    doc = json.loads(program_to_bytes(good))
    assert program_from_bytes(json.dumps(doc).encode()).key() == good.key()
    doc["tensors"][0]["value"][0] = math.nan  # json writes NaN, which targets cannot read
    with pytest.raises(CaseError) as info:
        program_from_bytes(json.dumps(doc).encode())
    assert f"tensors.{doc['tensors'][0]['name']}.value[0]" in str(info.value)


# -- 2. --baseline ---------------------------------------------------------------------------------

ENTRY = '[[known]]\nid = "x"\nreason = "r"\ncase = "tests/cases/planted.toml"\n'

# (baseline text, field the message must name)
BAD_BASELINES = {
    "known_int": ("known = 5\n", "known"),
    "known_ints": ("known = [1, 2]\n", "known[0]"),
    "frameworks_int": (ENTRY + "frameworks = 1\n", "known[0].frameworks"),
    "frameworks_string": (ENTRY + 'frameworks = "candle"\n', "known[0].frameworks"),
    "frameworks_ints": (ENTRY + "frameworks = [1, 2]\n", "known[0].frameworks"),
    "id_int": ('[[known]]\nid = 5\nreason = "r"\ncase = "c.toml"\n', "known[0].id"),
    "reason_list": ('[[known]]\nid = "x"\nreason = ["r"]\ncase = "c.toml"\n', "known[0].reason"),
    "case_table": ('[[known]]\nid = "x"\nreason = "r"\ncase = { a = 1 }\n', "known[0].case"),
    "kind_int": (ENTRY + "kind = 1\n", "known[0].kind"),
    "aspect_bool": (ENTRY + "aspect = true\n", "known[0].aspect"),
    "method_list": (ENTRY + "method = [1]\n", "known[0].method"),  # a list of patterns, not of numbers
    "op_float": (ENTRY + "op = 1.5\n", "known[0].op"),
    "upstream_int": (ENTRY + "upstream = 3\n", "known[0].upstream"),
    "sides_ints": (ENTRY + "sides = [1]\n", "known[0].sides"),
    "sides_empty": (ENTRY + "sides = []\n", "known[0].sides"),
    "misspelt_table": (ENTRY.replace("known", "knwon"), "knwon"),
    "invalid_toml": ("[[known]\n", "invalid TOML"),
}


def _bad_baseline(tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.toml"
    if name == "absent":
        pass
    elif name == "directory":
        path.mkdir()
    elif name == "fifo":
        os.mkfifo(path)
    elif name == "not_utf8":
        path.write_bytes(ENTRY.encode() + b'upstream = "\xff\xfe"\n')
    else:
        path.write_text(BAD_BASELINES[name][0])
    return path


BASELINE_FILE_FAULTS = {
    "absent": "cannot read",
    "directory": "not a regular file",
    "fifo": "not a regular file",
    "not_utf8": "UTF-8",
}


@pytest.mark.parametrize("name", sorted(BAD_BASELINES) + sorted(BASELINE_FILE_FAULTS))
def test_bad_baseline_is_a_one_line_baseline_error(tmp_path: Path, name: str):
    from harness.fuzzing.baseline import BaselineError, load_baseline

    path = _bad_baseline(tmp_path, name)
    with pytest.raises(BaselineError) as info:
        load_baseline(path)
    message = str(info.value)
    assert isinstance(info.value, InputError)
    assert message.startswith(f"{path}: ") and "\n" not in message, message
    assert (BAD_BASELINES[name][1] if name in BAD_BASELINES else BASELINE_FILE_FAULTS[name]) in message, message


@pytest.mark.parametrize("name", ["absent", "known_int", "frameworks_int", "not_utf8", "invalid_toml", "directory"])
def test_repro_with_a_bad_baseline_is_one_line_exit_2(tmp_path: Path, name: str):
    # Before: an absent file was an empty baseline (exit 1, every known finding "new"); the
    # others were tracebacks.
    path = _bad_baseline(tmp_path, name)
    one_line_exit_2(
        run_cli_in_process("repro", str(GOOD_CASE), "--targets", "torch:cpu", "--baseline", str(path), timeout=120),
        str(path),
    )


def test_fuzz_with_an_absent_baseline_is_one_line_exit_2(tmp_path: Path):
    absent = tmp_path / "no-such-baseline.toml"
    result = run_cli_in_process(
        "fuzz",
        "--targets",
        "torch:cpu",
        "--max-programs",
        "1",
        "--baseline",
        str(absent),
        "--out",
        str(tmp_path / "run"),
        timeout=300,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stdout + result.stderr
    assert str(absent) in result.stderr and "cannot read" in result.stderr


def test_the_bundled_baseline_and_a_well_formed_file_still_load(tmp_path: Path):
    from harness.fuzzing.baseline import load_baseline

    assert len(load_baseline().entries) >= 8
    path = tmp_path / "b.toml"
    path.write_text(
        ENTRY + 'frameworks = ["candle", "torch"]\nmethod = "clone"\nsides = ["a~b", "c~d"]\nupstream = "ref"\n'
    )
    entry = load_baseline(path).entries[0]
    assert entry.frameworks == ("candle", "torch") and entry.sides == ("a~b", "c~d")
    path.write_text("")  # an empty file is a baseline that knows nothing
    assert load_baseline(path).entries == []


@pytest.mark.parametrize("command", ["repro", "minimize"])
def test_a_fifo_is_refused_without_opening_it(tmp_path: Path, command: str):
    fifo = tmp_path / "case.toml"
    os.mkfifo(fifo)
    # Before: open() blocked forever waiting for a writer (TimeoutExpired here).
    line = one_line_exit_2(run_cli_in_process(command, str(fifo), "--targets", "torch:cpu", timeout=60), str(fifo))
    assert "not a regular file (a FIFO)" in line


def test_a_case_file_over_1_mib_is_refused_and_one_at_1_mib_loads(tmp_path: Path):
    from harness.case.values import MAX_FILE_BYTES

    text = GOOD_CASE.read_text()
    path = tmp_path / "padded.toml"
    padding = MAX_FILE_BYTES - len(text.encode()) - 2
    path.write_text(text + "#" + "x" * padding + "\n", encoding="utf-8")
    assert path.stat().st_size == MAX_FILE_BYTES
    assert load_case(path).key() == load_case(GOOD_CASE).key()
    path.write_text(text + "#" + "x" * (padding + 1) + "\n", encoding="utf-8")
    refused_message = pytest.raises(CaseError, load_case, path).value
    assert str(refused_message) == f"{path}: larger than 1 MiB: too large for a file aliasfuzz reads"


def test_a_symlink_to_a_case_file_loads(tmp_path: Path):
    link = tmp_path / "link.toml"
    link.symlink_to(GOOD_CASE)
    assert load_case(link).key() == load_case(GOOD_CASE).key()


# -- 4. malformed cases that gave tracebacks, and the whole class --------------------------------

DEEP = 5000
# (case text, the location the message must name, a fragment of the message)
TRACEBACK_CASES = {
    "op_is_a_list": (HEADER + '[[ops]]\nop = ["snapshot"]\n', "ops[0].op", "unknown op"),
    "op_is_a_table": (HEADER + "[[ops]]\nop = { a = 1 }\n", "ops[0].op", "unknown op"),
    "param_shape_int": (HEADER.replace("2.0] }", "2.0], shape = 5 }"), "tensors.w.shape", "says 5"),
    "param_shape_strings": (HEADER.replace("2.0] }", '2.0], shape = ["2"] }'), "tensors.w.shape", "says"),
    "value_5000_deep": (
        'format = "aliasfuzz-case/1"\n[tensors]\nw = { kind = "param", value = '
        + "[" * DEEP
        + "1.0"
        + "]" * DEEP
        + " }\n",
        "",
        "nested too deeply",
    ),
    "value_200_deep": (
        'format = "aliasfuzz-case/1"\n[tensors]\nw = { kind = "param", value = '
        + "[" * 200
        + "1.0"
        + "]" * 200
        + " }\n",
        "tensors.w.value[0][0][0]",
        "rank",
    ),
    "meta_100_deep": (HEADER + "[meta]\nm = " + "[" * 100 + "]" * 100 + "\n", "meta", "nested more than"),
    "ops_is_an_int": (HEADER.replace("[tensors]", "ops = 5\n[tensors]"), "ops", "expected an array"),
    "op_is_an_int": (HEADER.replace("[tensors]", "ops = [1]\n[tensors]"), "ops[0]", "expected a table"),
    "tensor_is_an_int": ('format = "aliasfuzz-case/1"\n[tensors]\nw = 1\n', "tensors.w", "expected a table"),
    "method_is_a_list": (
        HEADER + '[[ops]]\nop = "snapshot"\nname = "s"\nof = "w"\nmethod = ["clone"]\n',
        "ops[0].method",
        "unknown method",
    ),
    "optimizer_is_a_table": (
        HEADER + '[[ops]]\nop = "step"\noptimizer = { a = 1 }\nlr = 0.1\n',
        "ops[0].optimizer",
        "unknown optimizer",
    ),
    "betas_is_a_string": (_step('betas = "0.9"'), "ops[0].betas", "two numbers"),
    "lazy_seed_too_large": (
        'format = "aliasfuzz-case/1"\n[tensors]\nl = { kind = "lazy", shape = [2], '
        'init = "uniform", seed = 18446744073709551616 }\n',
        "tensors.l.seed",
        "integer in",
    ),
    "index_is_a_float": (
        HEADER.replace("[1.0, 2.0]", "[[1.0, 2.0]]") + '[[ops]]\nop = "write"\ntarget = "w"\n'
        "index = 0.0\nvalue = [1.0, 2.0]\n",
        "ops[0].index",
        "integer",
    ),
}


@pytest.mark.parametrize("name", sorted(TRACEBACK_CASES))
def test_malformed_case_is_a_case_error_naming_the_field(tmp_path: Path, name: str):
    text, where, fragment = TRACEBACK_CASES[name]
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    with pytest.raises(CaseError) as info:
        load_case(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and "\n" not in message and fragment in message, message
    assert not where or f": {where}: " in message, message


@pytest.mark.parametrize("command", ["repro", "minimize"])
@pytest.mark.parametrize("name", ["op_is_a_list", "param_shape_int", "value_5000_deep"])
def test_malformed_case_cli_is_one_line_exit_2(tmp_path: Path, command: str, name: str):
    text, where, _ = TRACEBACK_CASES[name]
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    one_line_exit_2(run_cli_in_process(command, str(path), "--targets", "torch:cpu", timeout=120), str(path), where)
    assert not path.with_suffix(".min.toml").exists()


def test_an_unforeseen_failure_inside_validation_is_a_case_error_naming_the_place():
    class Hostile(dict):
        """A table whose every read fails: no check can foresee it."""

        def get(self, *args):
            raise RuntimeError("boom\nsecond line")

    doc = {"format": FORMAT, "tensors": {"w": {"kind": "param", "value": [1.0]}}, "ops": [Hostile(op="read")]}
    with pytest.raises(CaseError) as info:
        parse_case(doc, "hostile.toml")
    assert str(info.value) == r"hostile.toml: ops[0]: malformed (RuntimeError: boom\nsecond line)"
    with pytest.raises(CaseError) as info:
        parse_case(["not", "a", "table"], "list.toml")
    assert str(info.value).startswith("list.toml: expected a table")


# Random documents shaped loosely like cases: mostly the fields each kind of tensor and op takes,
# with good values, so that many documents get deep into validation (and some load); one field in
# ten is anything at all (a wrong type, random nesting), and now and then a table gets a field it
# does not take, so that the paths no check foresaw are exercised too.


def mostly(good: st.SearchStrategy, bad: st.SearchStrategy, one_in: int = 10) -> st.SearchStrategy:
    """``bad`` once in ``one_in`` draws, else ``good`` (``one_of(good, good, bad)`` would pick
    each branch about as often)."""
    return st.sampled_from([good] * (one_in - 1) + [bad]).flatmap(lambda chosen: chosen)


NAMES = mostly(
    st.sampled_from(["w", "p0", "b0", "l0", "s0", "m0", "m0.w", "bn", "drop", "bn.running_mean", "m0.bn.running_var"]),
    st.sampled_from(["p0\n", "a b", "", "1x", "w.x", "tensors"]) | st.text(max_size=4),
    one_in=5,
)
NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**130), 2**130),
    st.sampled_from([0, 1, -1, 0.5, 1e39, -1e300, 3.4028234663852886e38]),
)
GOOD_NUMBERS = st.floats(-4, 4, width=32) | st.integers(-4, 4)
WORDS = st.sampled_from(
    sorted({*TENSOR_KINDS, *LAZY_INITS, *METHODS, *OP_KINDS, *OPTIMIZERS, "home", "cpu", "alt", "to", "fork", FORMAT})
)
SCALARS = st.one_of(NUMBERS, st.booleans(), WORDS, NAMES, st.dates())
ANY = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(NAMES | WORDS, inner, max_size=3),
    max_leaves=12,
)


def _rectangular(shape: list[int]) -> st.SearchStrategy:
    if not shape:
        return mostly(GOOD_NUMBERS, NUMBERS, one_in=20)
    return st.lists(_rectangular(shape[1:]), min_size=shape[0], max_size=shape[0])


SHAPES = st.lists(st.integers(1, 3), min_size=1, max_size=3)
VALUES = mostly(
    SHAPES.flatmap(_rectangular), st.recursive(NUMBERS, lambda inner: st.lists(inner, max_size=3), max_leaves=10)
)  # ragged, deep
FIELD_VALUES = {
    "value": VALUES,
    "grad": VALUES,
    "shape": mostly(SHAPES, st.lists(st.integers(-1, 5), max_size=4)),
    "init": st.sampled_from(LAZY_INITS),
    "fill": GOOD_NUMBERS,
    "seed": st.integers(-1, 2**65),
    "name": NAMES,
    "of": NAMES,
    "target": NAMES,
    "method": st.sampled_from(METHODS),
    "index": st.none() | st.integers(-1, 3),
    "factor": GOOD_NUMBERS,
    "optimizer": st.sampled_from(OPTIMIZERS),
    "lr": GOOD_NUMBERS,
    "momentum": GOOD_NUMBERS,
    "eps": GOOD_NUMBERS,
    "weight_decay": GOOD_NUMBERS,
    "betas": mostly(st.lists(st.floats(0, 0.99), min_size=2, max_size=2), st.lists(NUMBERS, max_size=3), one_in=5),
    "device": st.sampled_from(["home", "cpu", "alt"]),
    "op": st.sampled_from(OP_KINDS),
}
UNKNOWN = st.dictionaries(
    st.sampled_from(["colour", "op", "kind", "ops", "value", "seed", "shape"]), ANY, min_size=1, max_size=1
)


def _strategies(fields: tuple[str, ...] | dict[str, st.SearchStrategy]) -> dict[str, st.SearchStrategy]:
    return fields if isinstance(fields, dict) else {k: FIELD_VALUES[k] for k in fields}


def _table(
    required: dict[str, st.SearchStrategy], optional: tuple[str, ...] | dict[str, st.SearchStrategy]
) -> st.SearchStrategy:
    """A table with the ``required`` fields and some of the ``optional`` ones, one value in ten
    anything, and one table in ten with a field more (which may be one it does not take)."""
    known = st.fixed_dictionaries(
        {k: mostly(v, ANY) for k, v in required.items()},
        optional={k: mostly(v, ANY) for k, v in _strategies(optional).items()},
    )
    return mostly(known, st.tuples(known, UNKNOWN).map(lambda t: {**t[1], **t[0]}))


def _tensor(kind: str) -> st.SearchStrategy:
    if kind == "lazy":
        return _table(
            {"kind": st.just(kind), "shape": FIELD_VALUES["shape"], "init": FIELD_VALUES["init"]}, ("fill", "seed")
        )
    # No "shape" here: drawn apart from the value it would rarely agree (the unknown field of
    # _table gives a shape now and then).
    return _table({"kind": st.just(kind), "value": VALUES}, ("grad",) if kind == "param" else ())


def _field_values(f) -> st.SearchStrategy:
    """What a document gives for op field ``f``: the strategy of its name where the table above
    has one, else one by the field's kind in the op table (so a new op's fields are drawn too)."""
    if f.name in FIELD_VALUES:
        return FIELD_VALUES[f.name]
    if f.kind == "choice":
        return mostly(st.sampled_from(f.choices), ANY)
    return {
        "name": NAMES,
        "new": NAMES,
        "prefix": NAMES,
        "checkpoint": NAMES,
        "layer": NAMES,
        "number": GOOD_NUMBERS,
        "values": VALUES,
        "row": FIELD_VALUES["index"],
        "betas": FIELD_VALUES["betas"],
        "flag": mostly(st.booleans(), ANY),
    }[f.kind]


def _op(kind: str) -> st.SearchStrategy:
    fields = OPS[kind].fields
    return _table(
        {"op": st.just(kind), **{f.name: _field_values(f) for f in fields if f.required}},
        {f.name: _field_values(f) for f in fields if not f.required},
    )


TENSOR = mostly(st.sampled_from(TENSOR_KINDS).flatmap(_tensor), ANY)
LAYER = mostly(
    st.one_of(
        _table(
            {"kind": st.just("batch_norm")},
            {
                "features": st.sampled_from([2, 0, 9, 1.5, True]),
                "momentum": st.sampled_from([0.5, 0.0, 1.5, float("nan")]),
            },
        ),
        _table({"kind": st.just("dropout")}, {"p": st.sampled_from([0.0, 1.0, 0.5, -1.0])}),
    ),
    ANY,
)
OP = mostly(st.sampled_from(OP_KINDS).flatmap(_op), ANY)
TENSOR_NAMES = mostly(st.sampled_from(["w", "p0", "b0", "l0"]), NAMES)
DOCUMENT = st.fixed_dictionaries(
    {
        "format": mostly(st.just(FORMAT), ANY),
        "tensors": mostly(st.dictionaries(TENSOR_NAMES, TENSOR, min_size=1, max_size=3), ANY),
        "ops": mostly(st.lists(OP, max_size=6), ANY),
    },
    optional={
        "title": mostly(st.text(max_size=5), ANY),
        "meta": ANY,
        "layers": mostly(st.dictionaries(st.sampled_from(["bn", "drop", "w"]), LAYER, max_size=2), ANY),
    },
)
DOCUMENTS = mostly(
    DOCUMENT, st.tuples(DOCUMENT, st.dictionaries(NAMES, ANY, min_size=1, max_size=2)).map(lambda t: {**t[1], **t[0]})
)


# AF_EXAMPLES=5000 for a longer search (about 5 minutes).
@settings(
    max_examples=int(os.environ.get("AF_EXAMPLES", 400)),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(doc=DOCUMENTS)
def test_random_documents_raise_only_case_error(tmp_path_factory, doc):
    try:
        program = parse_case(doc, "random.toml")
    except CaseError as e:
        assert str(e).startswith("random.toml") and "\n" not in str(e)
        program = None
    if program is not None:
        # What loads is well-formed for every target: JSON without NaN, and a case file that
        # reads back as the same program.
        json.dumps(program.to_wire(), allow_nan=False)
        assert parse_case(tomllib.loads(dump_case(program))).key() == program.key()
    # The same document as a real file: load_case refuses exactly what parse_case refused.
    try:
        text = tomli_w.dumps(doc)
    except (TypeError, ValueError):
        return  # not expressible in TOML (tomli_w refuses it): parse_case alone is the test
    path = tmp_path_factory.getbasetemp() / "random.toml"
    path.write_text(text, encoding="utf-8")
    try:
        loaded = load_case(path)
    except CaseError as e:
        assert program is None, e
        assert str(e).startswith(str(path)) and "\n" not in str(e)
    else:
        assert program is not None and loaded.key() == program.key()


# -- 5. names end where they seem to ---------------------------------------------------------------


@pytest.mark.parametrize(
    "text, where",
    [
        ('format = "aliasfuzz-case/1"\n[tensors]\n"p0\\n" = { kind = "param", value = [1.0] }\n', r"tensors.p0\n"),
        (HEADER + '[[ops]]\nop = "snapshot"\nname = "s0\\n"\nof = "w"\nmethod = "clone"\n', "ops[0].name"),
        (HEADER + '[[ops]]\nop = "module_clone"\nname = "m0\\n"\n', "ops[0].name"),
        (HEADER + '[[ops]]\nop = "snapshot"\nname = "s0\\u2028"\nof = "w"\nmethod = "clone"\n', "ops[0].name"),
    ],
    ids=["tensor", "snapshot", "module_clone", "line_separator"],
)
def test_a_name_ending_in_a_newline_is_refused(tmp_path: Path, text: str, where: str):
    path = tmp_path / "case.toml"
    path.write_text(text)
    refused(path, where, "name")
    one_line_exit_2(run_cli_in_process("repro", str(path), "--targets", "torch:cpu", timeout=120), where)


def test_check_program_refuses_a_name_ending_in_a_newline():
    with pytest.raises(CaseError) as info:
        check_program((TensorDecl("p0\n", "param", (1,), (1.0,)),), [])
    assert str(info.value) == r"<case>: tensors.p0\n: tensor names are identifiers (letters, digits, '_')"
    with pytest.raises(CaseError):
        check_program((W,), [{"op": "snapshot", "name": "s\n", "of": "w", "method": "clone"}])


def test_name_pattern_is_matched_whole():
    from harness.case.values import NAME_RE, is_identifier

    assert is_identifier("p0") and not is_identifier("p0\n") and not is_identifier("m.p0")
    assert NAME_RE.fullmatch("m0.p0") and not NAME_RE.fullmatch("m0.p0\n")


def test_an_error_message_is_one_line_whatever_it_quotes(tmp_path: Path):
    path = tmp_path / "two\nlines.toml"
    path.write_text(HEADER + '[[ops]]\nop = "read"\ntarget = "x\\ny"\n')
    message = str(pytest.raises(CaseError, load_case, path).value)
    assert "\n" not in message and r"two\nlines.toml" in message and "ops[0].target" in message
