"""``aliasfuzz draft``: the reproducers and the upstream report draft of any case file, made by the
code a campaign's report uses, on the real frameworks.

The tests of this subject that run in-process are in tests/unit/reporting/test_draft.py.
"""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import CASES, run_cli


def test_draft_of_a_candidate_names_the_call_and_makes_it(tmp_path):
    r = run_cli("draft", str(CASES / "candle_flip_of_a_strided_tensor_fails.toml"), "--out", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    stem = "candle_flip_of_a_strided_tensor_fails"
    draft = (tmp_path / f"{stem}.issue.md").read_text(encoding="utf-8")
    title = draft.splitlines()[0]
    assert title.startswith("# candle: `flip` fails on a tensor made by `transpose`"), title
    main = (tmp_path / f"{stem}-candle" / "src" / "main.rs").read_text(encoding="utf-8")
    assert ".flip(&[0])?" in main and 'println!("op 1: error: {e}")' in main
    body = main[main.index("fn main()") :]
    body = body[: body.index("\n}\n")]
    statements = [line for line in body.splitlines() if line.rstrip().endswith(";")]
    assert len(statements) <= 15, body  # the size target of a reproducer a maintainer reads
    assert main.strip() in draft  # the reproducer inline
    assert "op 1: error: index-select only supports contiguous tensors" in draft  # what it prints
    assert "- Where the expectation comes from: the reference framework, PyTorch (`torch:cpu`)" in draft
    assert (tmp_path / f"{stem}.toml").read_text() == (CASES / f"{stem}.toml").read_text()


def test_a_case_with_only_known_divergences_has_nothing_to_draft_unless_asked(tmp_path):
    case = CASES / "candle_clone_shares_storage.toml"
    r = run_cli("draft", str(case), "--out", str(tmp_path / "plain"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert str(case) in r.stderr and "nothing to draft: every divergence is known" in r.stderr
    assert not list((tmp_path / "plain").glob("*.issue.md"))
    r = run_cli("draft", str(case), "--known", "--out", str(tmp_path / "known"))
    assert r.returncode == 0, r.stderr
    assert list((tmp_path / "known").glob("*.issue.md"))


def test_draft_of_an_optimizer_variant_names_the_class_and_its_keywords(tmp_path):
    stem = "torch_foreach_adamw_with_aliased_parameters"
    r = run_cli("draft", str(CASES / f"{stem}.toml"), "--out", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    draft = (tmp_path / f"{stem}.issue.md").read_text(encoding="utf-8")
    assert draft.splitlines()[0] == (
        "# torch: `torch.optim.AdamW` gives different values with `foreach=False` and `foreach=True`"
    )
    script = (tmp_path / f"{stem}.torch.py").read_text(encoding="utf-8")
    assert "run('', foreach=False)" in script and "run('foreach: ', foreach=True)" in script
    assert script.strip() in draft  # the reproducer inline


def test_a_value_torch_alone_computes_is_drafted_against_torch(tmp_path):
    """candle and burn normalize the values passed to a training batch norm alike; torch alone
    differs (its input is a view of the running_var it updates first): the draft is torch's, its
    reproducer the torch script checked against candle's values. Compiled torch normalizes the
    values passed too: a second draft, eager against compiled, with a script that runs both. The
    forward's update of the running statistics does not bump their version counters (pytorch#13402):
    two more drafts, that one and compiled torch, which bumps them, against eager torch."""
    stem = "torch_batch_norm_normalizes_an_input_it_updated"
    r = run_cli("draft", str(CASES / f"{stem}.toml"), "--out", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    drafts = {p.name: p.read_text(encoding="utf-8") for p in tmp_path.glob("*.issue.md")}
    assert len(drafts) == 4, sorted(drafts)
    titles = sorted(d.splitlines()[0] for d in drafts.values())
    assert "# torch: `forward` changes a tensor's values without bumping its version counter" in titles
    assert (
        "# torch: `forward` gives different version counters in eager mode and under"
        " `torch.compile(backend='aot_eager')`" in titles
    )
    (framework,) = [d for d in drafts.values() if d.startswith("# torch: `forward` gives other values than candle:cpu")]
    assert (
        "- Observed, on `torch:cpu`:" in framework and "agree with each other where PyTorch alone differs" in framework
    )
    script = next(p for p in tmp_path.glob("*.torch.py") if p.read_text(encoding="utf-8").strip() in framework)
    assert "divergence |= check_values('s1', s1, [0.0, 0.0], 'candle:cpu')" in script.read_text(encoding="utf-8")
    (compiled,) = [
        d for d in drafts.values() if d.startswith("# torch: `forward` gives different values in eager mode")
    ]
    assert "def run_plain(label):" in compiled and "def run_compile(label):" in compiled


def test_identity_that_torch_alone_keeps_apart_is_not_drafted_against_torch(tmp_path):
    """candle and burn both keep one object where torch makes two: a design difference, so the
    draft stays addressed to the framework beside torch."""
    r = run_cli(
        "draft",
        str(CASES / "candle_failed_load_sets_a_subset_in_hashmap_order.toml"),
        "--known",
        "--out",
        str(tmp_path),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    titles = [p.read_text(encoding="utf-8").splitlines()[0] for p in sorted(tmp_path.glob("*.issue.md"))]
    assert titles and not [t for t in titles if t.startswith("# torch: ")], titles
    assert any("two names are same objects (torch:cpu: distinct)" in t for t in titles), titles


def test_a_cause_several_candidate_cases_show_is_drafted_once_from_the_most_specific(tmp_path):
    """Every candidate case with a training-mode batch norm forward shows the running statistics'
    unbumped version counters: one draft of it, from the one-op case written for it, and each
    other case keeps the drafts of its own cause."""
    r = run_cli("draft", "--candidates", "--out", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    titles = {p.name: p.read_text(encoding="utf-8").splitlines()[0] for p in tmp_path.glob("*.issue.md")}
    hidden = "# torch: `forward` changes a tensor's values without bumping its version counter"
    assert [n for n, t in titles.items() if t == hidden] == [
        "torch_batch_norm_updates_running_stats_without_bumping_their_version.issue.md"
    ]
    assert titles["burn_load_after_a_training_forward_is_undone.issue.md"].startswith("# burn: `forward`")
    # The Inductor candidates show only on the on-request target, which a second run names: drafted
    # against torch.compile, and no candidate is left undrafted.
    assert (
        "`torch.compile(backend='inductor')`"
        in titles["torch_inductor_returns_the_input_of_a_multiplication_by_one.issue.md"]
    )
    assert "showed no divergence" not in (tmp_path / "index.md").read_text(encoding="utf-8")
    # A candle candidate whose divergences are all known is drafted by candle's, not by what the
    # second run's on-request torch target shows in its program.
    assert titles["candle_failed_load_sets_a_subset_in_hashmap_order.issue.md"].startswith("# candle: ")
    # A torch:cpu+graph candidate is drafted against its compiled function.
    assert (
        "`torch.compile(backend='aot_eager')`"
        in titles["torch_graph_chunk_of_a_parameter_written_in_the_same_graph_is_a_copy.issue.md"]
    )


def test_a_draft_of_a_compiled_variants_version_counter_shows_what_its_script_prints(tmp_path):
    # Eager against compiled torch: the script runs both and prints whether the op moved the
    # counter in each; the draft's account of its output must be those lines, not a hidden write.
    case = CASES / "torch_compile_copy_between_a_parameter_and_its_alias_keeps_the_version.toml"
    r = run_cli("draft", str(case), "--targets", "torch:cpu,torch:cpu+compile", "--out", str(tmp_path))
    assert r.returncode in (0, 1), r.stderr
    [draft] = tmp_path.glob("*.issue.md")
    text = draft.read_text(encoding="utf-8")
    [script] = tmp_path.glob(draft.name.replace(".issue.md", ".torch.py"))
    ran = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    printed = ran.stdout.strip().splitlines()[-2:]
    assert printed[0].startswith("check: op 1 moves the version counter of w: True without compile, False with it")
    assert "\n".join(printed) in text
