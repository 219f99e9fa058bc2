"""Reports (report.md / report.html / history.html), the report command, and the stand-alone
reproducers: the PyTorch script and the generated candle and burn cargo projects must print what
the targets observed for the same case.

The tests of this subject that run in-process are in tests/unit/reporting/test_reports.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.case.case_file import load_case
from harness.paths import cargo_target_dir
from harness.targets.reproducers import parse_output, prepare_cargo_build, torch_script, trace_states, write_project
from tests.conftest import CASES, need, repro_json_alone, run_cli
from tests.support.fake_targets import fake_probe_dir
from tests.support.reproducers import cargo_reproducer, compare_printed, run_torch_scripts


@pytest.fixture(scope="module")
def fake_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("reports")
    out = tmp / "reports" / "run1"
    r = run_cli(
        "fuzz",
        "--targets",
        "candle",
        "--max-programs",
        "256",
        "--seed",
        "1",
        "--profile",
        "quick",
        "--shrink-time",
        "10",
        "--out",
        str(out),
        env=fake_probe_dir(tmp),
    )
    assert r.returncode == 1, r.stdout + r.stderr
    return out


def test_reports_are_written_with_summary_and_findings(fake_run):
    md = (fake_run / "report.md").read_text()
    page = (fake_run / "report.html").read_text()
    findings = json.loads((fake_run / "findings.json").read_text())
    for text in (md, page):
        assert "seed" in text and "throughput" in text and "candle:planted" in text
        for f in findings:
            assert f["case"] in text
    assert "<script" not in page and "http://" not in page and "https://" not in page
    assert 'class="side-by-side"' in page and 'class="divergent' in page
    assert "[format]" not in page and "format = &quot;aliasfuzz-case/1&quot;" in page
    for f in findings:  # reproducers next to each new or flaky case, linked from the report
        stem = f["case"][: -len(".toml")]
        handed_over = f["status"] in ("new", "flaky")
        assert (fake_run / f"{stem}.torch.py").exists() == handed_over
        assert (fake_run / f"{stem}-candle" / "Cargo.toml").exists() == handed_over
        assert (f"{stem}.torch.py" in page) == handed_over
        if not handed_over and f.get("baseline_case"):  # a known one names how to make them
            assert f"aliasfuzz draft {f['baseline_case']}" in md


def test_a_new_finding_has_an_upstream_report_draft(fake_run):
    findings = json.loads((fake_run / "findings.json").read_text())
    page = (fake_run / "report.html").read_text()
    new = [f for f in findings if f["status"] == "new"]
    assert new, "the planted divergence is new"
    for f in findings:
        stem = f["case"][: -len(".toml")]
        draft = fake_run / f"{stem}.issue.md"
        if f["status"] != "new":
            assert not draft.exists(), f"{draft}: a known finding has its baseline entry, not a draft"
            continue
        text = draft.read_text()
        assert text.startswith("# candle: ") and f"{stem}.issue.md" in page
        assert f["sentence"] not in text.splitlines()[0], "the title names the call, not the oracle's sentence"
        for heading in (
            "## Reproducer",
            "## Expected and observed",
            "## Why it matters",
            "## Versions",
            "## The minimized case",
            "## To reproduce",
        ):
            assert heading in text, heading
        # The planted divergence is between two candle targets: the expectation is candle's own other target.
        assert (
            f["kind"] == "device" and "- Where the expectation comes from: the same framework on another device" in text
        )
        assert f"aliasfuzz repro {f['case']}" in text and f"cd {stem}-candle && cargo run" in text
        assert "fn main()" in text and (fake_run / f"{stem}-candle" / "src" / "main.rs").read_text().strip() in text


def test_report_command_and_history(fake_run, tmp_path):
    (fake_run / "report.html").unlink()
    r = run_cli("report", str(fake_run))
    assert r.returncode == 0 and (fake_run / "report.html").exists(), r.stderr
    second = fake_run.parent / "run2"
    shutil.copytree(fake_run, second)
    r = run_cli("report", "--history", str(fake_run.parent))
    assert r.returncode == 0, r.stderr
    page = (fake_run.parent / "history.html").read_text()
    assert page.count("<svg") == 1 and page.count('class="bar-new"') == 2 and "polyline" in page
    assert "run1/report.html" in page
    for args in ([str(tmp_path / "missing")], [str(tmp_path)], ["--history", str(tmp_path)], []):
        r = run_cli("report", *args)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)


def test_report_html_renders_in_headless_chromium(fake_run, tmp_path):
    exe = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if exe is None:
        need("chromium", "Debian/Ubuntu: apt-get install -y chromium")
    r = subprocess.run(
        [
            exe,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--dump-dom",
            (fake_run / "report.html").resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    dom = r.stdout
    assert '<section id="summary">' in dom and "programs run" in dom
    assert '<table class="side-by-side">' in dom and "follows" in dom and "keeps" in dom


# ------------------------------------------------------------------------------------------------
# Reproducers against the targets.


TORCH_CASES = sorted(CASES.glob("*.toml"))


@pytest.fixture(scope="module")
def torch_repro_docs() -> dict[str, dict]:
    """The repro JSON of every bundled case on torch:cpu, from one ``repro`` run (one torch
    worker for all of them, not one per case), by case file name."""
    r = run_cli("repro", "--json", "--targets", "torch:cpu", *map(str, TORCH_CASES))
    # One target is no comparison: exit 2, one line per case saying so, and every trace in the JSON.
    assert r.returncode == 2 and all("only torch:cpu ran the case" in line for line in r.stderr.splitlines()), r.stderr
    return {Path(d["case"]).name: d for d in json.loads(r.stdout)["cases"]}


@pytest.fixture(scope="module")
def torch_script_runs(tmp_path_factory) -> dict[str, tuple[str, str | None]]:
    """What the torch script of every bundled case printed, and its error, by case file name:
    all of them run in one interpreter (``run_torch_scripts``), each in its own namespace."""
    folder = tmp_path_factory.mktemp("torch-scripts")
    scripts = {}
    for case in TORCH_CASES:
        scripts[case.name] = folder / f"{case.stem}.torch.py"
        scripts[case.name].write_text(torch_script(load_case(case)), encoding="utf-8")
    ran = run_torch_scripts(list(scripts.values()), folder)
    return {name: ran[str(script)] for name, script in scripts.items()}


@pytest.mark.parametrize("case", TORCH_CASES, ids=[c.stem for c in TORCH_CASES])
def test_torch_script_prints_what_the_worker_observed(case, torch_repro_docs, torch_script_runs):
    doc = torch_repro_docs[case.name]
    tj = doc["targets"]["torch:cpu"]
    assert tj["status"] == "ok", tj
    printed, error = torch_script_runs[case.name]
    assert error is None, error
    compare_printed(parse_output(printed), trace_states(tj), case.name, tj["ops"])


def _without_run(doc: dict, target: str, n_ops: int, inert: list[int]) -> tuple[dict, list[dict]]:
    """A metamorphic case's second run from its repro JSON, in ``parse_output``'s form with the
    case's op numbering (and the statuses by that numbering)."""
    other = doc["without_inert"]["targets"][target]
    numbers = [i for i in range(n_ops) if i not in inert]
    states = {None if k is None else numbers[k]: v for k, v in trace_states(other).items()}
    statuses = [{"status": "ok"}] * n_ops
    for k, st in enumerate(other["ops"]):
        statuses[numbers[k]] = st
    return states, statuses


def test_reproducers_of_a_metamorphic_case_print_both_runs(tmp_path):
    case = CASES / "burn_unused_module_clone_stops_a_moved_lazy_training.toml"
    program = load_case(case)
    out, doc = cargo_reproducer("burn", case, "burn:flex", tmp_path)
    states, statuses = _without_run(doc, "burn:flex", len(program.ops), list(program.inert))
    second = parse_output(out, "without: ")
    compare_printed(second, states, "burn reproducer's run without the inert ops", statuses)
    assert "== without the inert ops [0] ==" in out
    # The divergence itself, as burn prints it: with the clone l stays, without it l trains.
    assert parse_output(out)[2]["l"] == [0.5, 0.5] and second[2]["l"] == [-0.5, -0.5]
    assert 0 not in second  # the inert op is not in the second run
    # torch's script prints both runs too (and agrees with itself).
    tdoc = repro_json_alone(case, "torch:cpu")
    script = tmp_path / "repro.torch.py"
    script.write_text(torch_script(program))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    states, statuses = _without_run(tdoc, "torch:cpu", len(program.ops), list(program.inert))
    compare_printed(parse_output(r.stdout, "without: "), states, "torch script's run without the inert ops", statuses)
    assert parse_output(r.stdout)[2]["l"] == parse_output(r.stdout, "without: ")[2]["l"] == [-0.5, -0.5]


def test_burn_reproducer_of_a_draw_order_case_prints_both_runs(tmp_path):
    # Lazy params of the program's one generator: the reproducer seeds it as the probe does, so
    # its draws are the probe's, in both runs (valid() initialises l0 first; without it, l1).
    case = CASES / "burn_valid_initialises_every_lazy_param.toml"
    program = load_case(case)
    out, doc = cargo_reproducer("burn", case, "burn:flex", tmp_path)
    states, statuses = _without_run(doc, "burn:flex", len(program.ops), list(program.inert))
    second = parse_output(out, "without: ")
    compare_printed(second, states, "burn reproducer's run without the inert ops", statuses)
    assert parse_output(out)[2]["l0"] == second[2]["l1"]  # the first draw went to another param


def test_candle_reproducer_prints_what_the_probe_observed(tmp_path):
    cargo_reproducer("candle", CASES / "candle_clone_shares_storage.toml", "candle:cpu", tmp_path)


def test_burn_reproducer_prints_what_the_probe_observed(tmp_path):
    cargo_reproducer("burn", CASES / "example_sgd_snapshots.toml", "burn:flex", tmp_path)


@pytest.mark.parametrize("framework,target", [("candle", "candle:cpu"), ("burn", "burn:flex")])
def test_reproducer_translates_every_snapshot_method(framework, target, tmp_path):
    # Every snapshot method across a step, state_dict and save_load (burn: record round trip and
    # checkpoint file) included; methods the framework has no call for are comments.
    cargo_reproducer(framework, CASES / "methods_across_step.toml", target, tmp_path)


@pytest.mark.parametrize(
    "framework,target,case",
    [
        ("candle", "candle:cpu", "assign_row_into_a_shared_clone.toml"),  # Var clone: the row reaches w
        ("burn", "burn:flex", "assign_from_a_transposed_snapshot.toml"),  # slice_assign of a transposed value
        ("candle", "candle:cpu", "assign_rows_of_a_transposed_snapshot.toml"),  # a row view refused by slice_set
        ("burn", "burn:flex", "assign_rows_of_a_transposed_snapshot.toml"),  # row_of: dst[i] = src[j]
    ],
)
def test_reproducer_translates_assign(framework, target, case, tmp_path):
    cargo_reproducer(framework, CASES / case, target, tmp_path)


@pytest.mark.parametrize(
    "framework,target,case",
    [
        ("candle", "candle:cpu", "load_state_dict_copies_in_place.toml"),  # VarMap::save / VarMap::load
        ("candle", "candle:cpu", "state_dict_best_weights_follow_training.toml"),  # the kept map; VarMap::set refused
        ("burn", "burn:flex", "state_dict_best_weights_follow_training.toml"),  # into_record / load_record
        ("burn", "burn:flex", "load_keeps_the_optimizer_state.toml"),  # save_file / load_file between steps
        ("burn", "burn:flex", "set_lr_keeps_the_optimizer_state.toml"),  # set_lr: the next step's lr
        ("candle", "candle:cpu", "nn_parameter_shares_storage.toml"),  # replace: Var::from_tensor
        ("burn", "burn:flex", "replace_new_param_is_left_by_the_optimizer.toml"),  # replace: Param::from_tensor
        ("candle", "candle:cpu", "gradient_accumulation_sums_two_passes.toml"),  # backward: accumulate
        ("burn", "burn:flex", "gradient_accumulation_sums_two_passes.toml"),  # backward: GradientsAccumulator
        ("candle", "candle:cpu", "kv_cache_view_follows_a_write_through_the_cache.toml"),  # append: kv_cache::Cache
        ("burn", "burn:flex", "kv_cache_view_follows_a_write_through_the_cache.toml"),  # append: RowCache
        ("candle", "candle:cpu", "kv_cache_append_of_a_transposed_view.toml"),  # append: Tensor::cat; a refused Cache
        ("burn", "burn:flex", "appended_cache_keeps_its_source.toml"),  # append: cat_rows of a param's value
        ("candle", "candle:cpu", "batch_norm_running_stats_across_clone_save_and_eval.toml"),
        ("candle", "candle:cpu", "dropout_returns_its_input.toml"),
        ("burn", "burn:flex", "batch_norm_running_stats_across_clone_save_and_eval.toml"),  # forward: BatchNorm
        ("burn", "burn:flex", "dropout_returns_its_input.toml"),  # forward: Dropout
        ("candle", "candle:cpu", "elementwise_ops_leave_clones_and_views_untouched.toml"),  # map, add
        ("burn", "burn:flex", "elementwise_ops_leave_clones_and_views_untouched.toml"),  # map_val, add_in_mode
    ],
)
def test_reproducer_translates_the_training_loop_ops(framework, target, case, tmp_path):
    cargo_reproducer(framework, CASES / case, target, tmp_path)


FAILING_CALLS = {
    "candle": "candle_flip_of_a_strided_tensor_fails.toml",
    "burn": "burn_param_from_tensor_of_a_computed_tensor.toml",
    "torch": "torch_expanded_view_refuses_a_whole_write.toml",
}


@pytest.mark.parametrize("framework,target", [("candle", "candle:cpu"), ("burn", "burn:flex"), ("torch", "torch:cpu")])
def test_a_reproducer_makes_the_failing_call_and_prints_its_error(framework, target, tmp_path):
    """The call the framework failed on is made, not left as a comment, and its error printed
    (candle's ``Result`` in a closure, burn's panic caught by ``catch_unwind``)."""
    case = CASES / FAILING_CALLS[framework]
    doc = repro_json_alone(case, target)
    failed = [i for i, s in enumerate(doc["targets"][target]["ops"]) if s["status"] == "error"]
    assert failed, doc["targets"][target]["ops"]
    if framework == "candle":
        out, _ = cargo_reproducer("candle", case, target, tmp_path)
        assert "flip(" in (tmp_path / "repro-candle" / "src" / "main.rs").read_text()
        assert f"op {failed[0]}: error: index-select only supports contiguous tensors" in out
    elif framework == "burn":
        out, _ = cargo_reproducer("burn", case, target, tmp_path)
        assert "Param::from_tensor(" in (tmp_path / "repro-burn" / "src" / "main.rs").read_text()
        assert f"op {failed[0]}: error: Can't convert a non leaf tensor into a tracked tensor" in out
    else:
        script = tmp_path / "repro.torch.py"
        script.write_text(torch_script(load_case(case)))
        r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        assert f"op {failed[0]}: error: RuntimeError: " in r.stdout, r.stdout


def _checked(framework: str, case: Path, check, tmp_path: Path) -> subprocess.CompletedProcess:
    """The reproducer of ``case`` with ``check``, built and run (torch: the script)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    if framework == "torch":
        script = tmp_path / "checked.torch.py"
        script.write_text(torch_script(load_case(case), check))
        return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    proj = write_project(
        load_case(case), framework, tmp_path / f"checked-{framework}", unify_with_probes=True, check=check
    )
    prepare_cargo_build(proj)
    env = {**os.environ, "CARGO_TARGET_DIR": str(cargo_target_dir())}
    return subprocess.run(["cargo", "run", "-q"], cwd=proj, env=env, capture_output=True, text=True, timeout=1800)


@pytest.mark.parametrize(
    "framework,target,case,op,subject",
    [
        ("candle", "candle:cpu", "candle_flip_of_a_strided_tensor_fails.toml", 1, None),  # the call fails
        ("candle", "candle:cpu", "candle_clone_shares_storage.toml", 1, "c"),  # a clone follows a step
        ("burn", "burn:flex", "burn_param_from_tensor_of_a_computed_tensor.toml", 1, None),  # a panic
        ("torch", "torch:cpu", "candle_clone_shares_storage.toml", 1, "c"),
    ],
)
def test_a_checked_reproducer_exits_1_exactly_when_the_divergence_shows(framework, target, case, op, subject, tmp_path):
    """Checked against the other side's value (or against the op running), the reproducer says
    the divergence shows and exits 1; checked against its own target's value (or against an op
    that runs), it says it does not and exits 0."""
    from harness.targets.reproducers import Check

    doc = repro_json_alone(CASES / case, target)
    own = trace_states(doc["targets"][target])
    if subject is None:
        shows, agrees = Check(op, None, None, "it fails"), Check(0, None, None, "op 0 fails")
    else:
        mine = own[op][subject]
        shows = Check(op, subject, tuple(v + 1.0 for v in mine), "another value")
        agrees = Check(op, subject, tuple(mine), target)
    r = _checked(framework, CASES / case, shows, tmp_path / "shows")
    assert r.returncode == 1 and "the divergence shows" in r.stdout, r.stdout + r.stderr[-2000:]
    r = _checked(framework, CASES / case, agrees, tmp_path / "agrees")
    assert r.returncode == 0 and "the divergence does not show" in r.stdout, r.stdout + r.stderr[-2000:]


@pytest.mark.parametrize(
    "case,shows",
    [("torch_foreach_adamw_over_two_parameters_on_one_storage.toml", True), ("example_sgd_snapshots.toml", False)],
)
def test_a_variant_script_runs_both_implementations_and_compares_them(case, shows, tmp_path):
    """A finding between torch:cpu and torch:cpu+foreach: the script builds the optimizers with
    foreach=False, then with foreach=True on a fresh model, and exits 1 when they disagree."""
    doc = repro_json_alone(CASES / case, "torch:cpu")
    script = tmp_path / "variants.torch.py"
    script.write_text(torch_script(load_case(CASES / case), None, ("plain", "foreach")))
    text = script.read_text()
    assert "run('', foreach=False)" in text and "run('foreach: ', foreach=True)" in text
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert r.returncode == (1 if shows else 0), r.stdout + r.stderr[-2000:]
    assert ("the divergence shows" if shows else "the divergence does not show") in r.stdout
    compare_printed(
        parse_output(r.stdout), trace_states(doc["targets"]["torch:cpu"]), case, doc["targets"]["torch:cpu"]["ops"]
    )


@pytest.mark.parametrize(
    "case,op,subject,shows",
    [
        ("torch_data_write_is_hidden_from_autograd.toml", 3, "w", True),  # through .data: hidden
        ("torch_detach_write_is_seen_by_autograd.toml", 3, "w", False),  # through detach(): seen
    ],
)
def test_a_version_checked_reproducer_exits_1_exactly_when_the_write_is_hidden(case, op, subject, shows, tmp_path):
    """A write hidden from autograd: the torch script keeps the subject's counter and values
    before the op, and after it says whether the values changed while the counter stayed."""
    from harness.targets.reproducers import Check

    r = _checked("torch", CASES / case, Check(op, subject, None, "the version counter", counter=True), tmp_path)
    assert r.returncode == (1 if shows else 0), r.stdout + r.stderr[-2000:]
    said = "the write is hidden from autograd" if shows else "autograd sees the write"
    assert f"check: {subject}: values changed, version counter" in r.stdout and said in r.stdout, r.stdout


def test_a_version_counter_one_variant_moves_is_checked_by_the_variant_script(tmp_path):
    """Eager torch bumps w's counter at an in-place copy from copy.copy(w); compiled torch does
    not: the script runs both and exits 1, naming the counter."""
    from harness.targets.reproducers import Check
    from harness.targets.torch.reproducer import torch_script

    program = load_case(CASES / "torch_compile_copy_between_a_parameter_and_its_alias_keeps_the_version.toml")
    script = tmp_path / "variant.py"
    check = Check(1, "w", None, "the version counter", counter=True)
    script.write_text(torch_script(program, check, ("plain", "compile")), encoding="utf-8")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr[-2000:]
    assert "check: op 1 moves the version counter of w: True without compile, False with it" in r.stdout
    assert "the divergence shows: ['w._version'] differ" in r.stdout
