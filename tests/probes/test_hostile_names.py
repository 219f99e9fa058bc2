"""Names are only names (issue 40, fault 15): a case may call its tensors, layers, snapshots,
clones and checkpoints by any identifier the case format accepts (``values.is_identifier``),
``nn.Module``'s own attribute names included, and every target observes the same thing and the
oracle reports the same signatures as under ordinary names.

Each case of tests/cases is run as written and with every name it binds replaced by a hostile one
(``HOSTILE``, rotated so that each is a param, a buffer, a layer, a snapshot and a prefix across
the cases). Before the fix the torch target registered each tensor on its ``nn.Module`` under the
case's name: ``register_parameter("training", ...)`` raises "attribute 'training' already exists",
and the program's error trace became an ``error|torch:cpu`` finding of its own.

The tests of this subject that run in-process are in tests/unit/case/test_hostile_names.py.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.case.case_file import load_case, write_case
from harness.judging.oracle import compare
from harness.targets.trace import Trace, alike
from tests.conftest import CASES, run_cli, targets_runner
from tests.support.hostile_names import (
    HOSTILE,
    back,
    hostile_cases,
    hostile_names,
    names_bound_count,
    rename,
)


def observed_alike(name: str, original: Trace, renamed: Trace, old_of: dict[str, str]) -> None:
    mapped = back(renamed, old_of)
    assert mapped.status == original.status, (name, renamed.target, renamed.status, renamed.message)
    for i, (a, b) in enumerate(zip(original.steps, mapped.steps)):
        assert a.status == b.status, (name, renamed.target, i, b.status, b.message)
    # statuses, names, shapes, dtypes, value bits, and identity tokens renamed by first appearance
    assert alike(original, mapped), (name, renamed.target)


def test_torch_observes_the_same_under_hostile_names():
    cases = hostile_cases()
    targets = ("torch:cpu",)
    with targets_runner(targets) as runner:
        originals = runner.run([c[1] for c in cases], every_target=True)
        hostile = runner.run([c[2] for c in cases], every_target=True)
    for (name, _, _, old_of), a, b in zip(cases, originals, hostile):
        observed_alike(name, a["torch:cpu"], b["torch:cpu"], old_of)


def test_every_target_observes_and_the_oracle_reports_the_same_under_hostile_names():
    # Each case runs twice as written: where the two runs differ on a target (candle's CPU
    # generator cannot be seeded, so its uniform lazy tensors differ from run to run), that
    # target's observations say nothing about names, and the case's signatures are compared only
    # where the two runs agree on them.
    cases = hostile_cases()
    targets = ("torch:cpu", "candle:cpu", "burn:flex")
    with targets_runner(targets) as runner:
        originals = runner.run([c[1] for c in cases], every_target=True)
        again = runner.run([c[1] for c in cases], every_target=True)
        hostile = runner.run([c[2] for c in cases], every_target=True)
    compared, unrepeatable = 0, []
    for (name, program, renamed, old_of), a, a2, b in zip(cases, originals, again, hostile):
        for t in targets:
            if alike(a[t], a2[t]):
                observed_alike(name, a[t], b[t], old_of)
            else:
                unrepeatable.append((name, t))
        want = [f.signature for f in compare(program, a)]
        if want != [f.signature for f in compare(program, a2)]:
            continue
        got = [f.signature for f in compare(renamed, b)]
        assert got == want, name
        compared += bool(want)
    assert all(t == "candle:cpu" for _, t in unrepeatable) and len(unrepeatable) <= len(cases) // 10, unrepeatable
    assert compared >= len(cases) // 2  # most cases are there because they diverge


def test_repro_reports_the_same_divergences_for_a_case_with_hostile_names(tmp_path):
    # What a user sees: ``aliasfuzz repro`` of the case under ordinary and hostile names.
    program = load_case(CASES / "batch_norm_running_stats_across_clone_save_and_eval.toml")
    renamed, _ = rename(program, hostile_names(0, names_bound_count(program)))
    assert {t.name for t in renamed.tensors} | {layer.name for layer in renamed.layers} <= set(HOSTILE)
    results = []
    for case in (program, renamed):
        path = write_case(case, tmp_path / f"{len(results)}.toml")
        result = run_cli("repro", str(path), "--targets", "torch:cpu,candle:cpu", "--json")
        assert result.returncode in (0, 1), result.stderr
        results.append(json.loads(result.stdout))
    assert [d["signature"] for d in results[1]["divergences"]] == [d["signature"] for d in results[0]["divergences"]]
    assert results[1]["targets"]["torch:cpu"]["status"] == "ok"


def test_torch_reproducers_of_hostile_names_run_and_print_what_torch_observed(tmp_path):
    # The reproducer registers each tensor and layer under its model key, as the torch target
    # does: a tensor named `training`, `forward` or `class` is a parameter like any other, and
    # the script prints, under the case's names, what the torch target observed.
    from harness.targets.reproducers import parse_output, torch_script, trace_states
    from tests.support.reproducers import compare_printed as _compare
    from tests.support.reproducers import run_torch_scripts

    cases = hostile_cases()
    paths = [write_case(renamed, tmp_path / f"{k:03d}.toml") for k, (_, _, renamed, _) in enumerate(cases)]
    r = run_cli("repro", "--json", "--targets", "torch:cpu", *map(str, paths))
    assert r.returncode == 2, r.stderr  # one target is no comparison; every trace is in the JSON
    docs = {Path(d["case"]).name: d for d in json.loads(r.stdout)["cases"]}
    scripts = []
    for path, (name, _, renamed, _) in zip(paths, cases):
        doc = docs[path.name]
        assert doc["targets"]["torch:cpu"]["status"] == "ok", (name, doc["targets"]["torch:cpu"])
        script = path.with_suffix(".torch.py")
        script.write_text(torch_script(renamed), encoding="utf-8")
        scripts.append(str(script))
    printed = run_torch_scripts(scripts, tmp_path)
    for script, path, (name, _, _, _) in zip(scripts, paths, cases):
        stdout, error = printed[script]
        assert error is None, (name, error)
        tj = docs[path.name]["targets"]["torch:cpu"]
        _compare(parse_output(stdout), trace_states(tj), f"torch reproducer of {name} under hostile names", tj["ops"])
