"""The nightly workflow and the Makefile agree with what aliasfuzz writes.

``.github/workflows/nightly.yml`` reads ``reports/latest``, which ``make fuzz`` maintains (the
``link_latest`` recipe, also ``make latest RUN=...``). These tests run the workflow's junit step
verbatim against a run folder written by a real short campaign, and the Makefile's recipes against
temporary folders. Nothing here builds, installs or touches the checkout's ``reports/``.

The tests here run in this process, as the
unit tier requires; those that need real processes are in tests/e2e/test_workflow.py.
"""

from __future__ import annotations

import textwrap

from tests.support.workflow import WORKFLOW, step, steps_by_text, workflow_steps

JOBS = ("linux-cpu", "macos-metal")


# ------------------------------------------------------------------------------------------------
# Reading the workflow: PyYAML when it is installed, else the few lines of it these tests need.


def test_the_text_reader_reads_this_workflow_as_yaml_would():
    """The fallback reader is what runs here when PyYAML is missing: check it on a snippet in
    the workflow's layout, block scalars and comments included."""
    text = textwrap.dedent("""\
        jobs:
          a:
            steps:
              - uses: actions/checkout@v4
              - name: junit
                # a comment
                id: junit
                run: |
                  one "two"

                  three
              - name: last
                run: echo hi
        """)
    assert steps_by_text(text) == {
        "a": [
            {"uses": "actions/checkout@v4"},
            {"name": "junit", "id": "junit", "run": 'one "two"\n\nthree\n'},
            {"name": "last", "run": "echo hi"},
        ]
    }


def test_every_job_runs_make_fuzz_then_the_same_junit_step_on_reports_latest():
    steps = workflow_steps()
    assert set(JOBS) <= set(steps)
    runs = {job: step(job, "junit")["run"] for job in JOBS}
    assert runs["linux-cpu"] == runs["macos-metal"]
    assert "reports/latest/findings.json" in runs["linux-cpu"]
    for job in JOBS:
        names = [s.get("name", "") for s in steps[job]]
        fuzz = next(i for i, n in enumerate(names) if n.startswith("fuzz"))
        assert steps[job][fuzz]["run"].startswith("make fuzz")
        # make fuzz alone fixes its seed; each night must draw new programs.
        assert 'SEED="${{ github.run_number }}"' in steps[job][fuzz]["run"]
        store = "restore the triage store (root causes across nightly runs)"
        fail = "fail on new, regressed or changed root causes"
        assert (
            names.index(store)
            < fuzz
            < names.index("junit")
            < names.index("recheck")
            < names.index("save the triage store")
            < names.index(fail)
        )
        assert step(job, fail)["if"] == (
            "steps.junit.outputs.failures != '0' || steps.recheck.outputs.changed != '0'"
            " || steps.recheck.outputs.regressed != '0'"
        )
    assert step("linux-cpu", "recheck")["run"] == step("macos-metal", "recheck")["run"]


def test_each_job_checks_its_devices_on_the_seed_snapshot_cases_and_linux_builds_burn_wgpu():
    """The Linux job builds and fuzzes with burn's wgpu backend on lavapipe; both jobs then replay
    every snapshot method across a step and a row write on their GPU-class devices beside the
    CPU, failing only when a target did not open (exit status 2)."""
    import shlex
    from pathlib import Path

    steps = workflow_steps()
    assert step("linux-cpu", "fuzz")["run"].startswith("make fuzz FULL=1 ")
    packages = next(s["run"] for s in steps["linux-cpu"] if s.get("name", "").startswith("system packages"))
    assert "mesa-vulkan-drivers" in packages and "libvulkan1" in packages
    devices = {"linux-cpu": {"burn:wgpu"}, "macos-metal": {"candle:metal", "burn:metal"}}
    for job, wanted in devices.items():
        names = [s.get("name", "") for s in steps[job]]
        fuzz = next(i for i, n in enumerate(names) if n.startswith("fuzz"))
        assert fuzz < names.index("device check") < names.index("junit")
        run = step(job, "device check")["run"]
        line = next(x for x in run.splitlines() if "aliasfuzz repro" in x)
        words = shlex.split(line.split(">")[0])
        cases = [w for w in words if w.endswith(".toml")]
        assert cases and all(Path(c).exists() for c in cases), cases
        targets = set(words[words.index("--targets") + 1].split(","))
        assert wanted <= targets and {"candle:cpu", "burn:flex"} <= targets, (job, targets)
        assert '[ "$status" -le 1 ]' in run


def test_the_device_package_job_builds_checks_and_uploads_the_package():
    """The nightly builds dist/device/ with `make device-package`, runs its run.sh where CUDA is
    absent (with the interpreter make set up), and uploads the package for a GPU machine."""
    steps = workflow_steps()["device-package"]
    names = [s.get("name", "") for s in steps]
    assert step("device-package", "device package")["run"] == "make device-package"
    check = step("device-package", "device check without CUDA")["run"]
    assert "PYTHON=.venv/bin/python" in check and "dist/device/run.sh" in check
    assert names.index("device package") < names.index("device check without CUDA")
    packages = next(s["run"] for s in steps if s.get("name", "").startswith("system packages"))
    assert "libvulkan1" in packages  # the loader the package carries
    # The text reader keeps no `with:` block, so the upload is read from the job's own text.
    job = WORKFLOW.read_text(encoding="utf-8").split("\n  device-package:\n", 1)[1]
    assert "uses: actions/upload-artifact@v4" in job and "path: dist/device/\n" in job
