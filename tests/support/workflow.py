"""What both tiers of the workflow tests share: ``WORKFLOW``, ``MAKE``, ``steps_by_text``, ``workflow_steps``, ``step``, ``make``."""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap

from tests.conftest import ROOT

WORKFLOW = ROOT / ".github" / "workflows" / "nightly.yml"


MAKE = shutil.which("make")


def steps_by_text(text: str) -> dict[str, list[dict[str, str]]]:
    """jobs -> steps (name, id, if, run) from the workflow's text, for the layout it uses: jobs
    at two spaces, `- ` steps at six, step keys at eight, `run: |` blocks indented below them."""
    jobs: dict[str, list[dict[str, str]]] = {}
    lines = text.splitlines()
    in_jobs, job, step, i = False, None, None, 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if line == "jobs:":
            in_jobs = True
            continue
        if not in_jobs or not line.strip() or line.lstrip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        if indent == 2 and line.rstrip().endswith(":"):
            job, step = line.strip()[:-1], None
            jobs[job] = []
            continue
        body = line.strip()
        if indent == 6 and body.startswith("- "):
            step = {}
            jobs[job].append(step)
            body, indent = body[2:], 8
        if step is None or indent != 8 or ":" not in body:
            continue
        key, _, value = body.partition(":")
        value = value.strip()
        if value in ("|", "|-"):
            block = []
            while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > 8):
                block.append(lines[i])
                i += 1
            value = textwrap.dedent("\n".join(block)).strip("\n") + "\n"
        step[key] = value
    return jobs


def workflow_steps() -> dict[str, list[dict[str, str]]]:
    text = WORKFLOW.read_text(encoding="utf-8")
    try:
        import yaml
    except ModuleNotFoundError:
        return steps_by_text(text)
    doc = yaml.safe_load(text)
    return {name: [{k: str(v) for k, v in s.items()} for s in job["steps"]] for name, job in doc["jobs"].items()}


def step(job: str, name: str) -> dict[str, str]:
    found = [s for s in workflow_steps()[job] if s.get("name") == name]
    assert len(found) == 1, f"{WORKFLOW.name}: job {job} has {len(found)} steps named {name!r}"
    return found[0]


def make(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [MAKE, "--no-print-directory", "-C", str(ROOT), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )
