"""What both tiers of the report reliability tests share: ``tree``, ``one_line``, ``mount``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest


def tree(d: Path) -> dict[str, bytes]:
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def one_line(r: subprocess.CompletedProcess, *words: str) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("aliasfuzz: "), r.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def mount(path: Path, size: str = "256k") -> None:
    path.mkdir()
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True
    )
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip()}): needs root")
