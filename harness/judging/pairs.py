"""Which targets the oracle compares with which, and as what kind of finding (see ``oracle.py``).

Target ids read ``framework:device`` with an optional ``+variant`` (``torch:cpu+foreach``)."""

from __future__ import annotations

from collections.abc import Sequence

#: Porting hazards are measured against the framework code is ported from.
REFERENCE_FRAMEWORK = "torch"


def split_target_id(target_id: str) -> tuple[str, str, str]:
    """``framework:device`` -> (framework, device, plain device): ``torch:cpu+foreach`` gives
    (torch, cpu+foreach, cpu)."""
    framework, device = target_id.split(":", 1)
    base = device.split("+", 1)[0]
    return framework, device, base


def primary_targets(target_ids: Sequence[str]) -> dict[str, str]:
    """Each framework's primary target: its first plain device (no variant) in id order."""
    primary: dict[str, str] = {}
    for t in sorted(target_ids):
        fw, device, base = split_target_id(t)
        if device == base and fw not in primary:
            primary[fw] = t
    return primary


def reference_target(target_id: str, target_ids: Sequence[str]) -> str | None:
    """The target that ``target_id``'s results are held against: the reference framework's
    primary target among ``target_ids``; None for a target of that framework, or without one."""
    if split_target_id(target_id)[0] == REFERENCE_FRAMEWORK:
        return None
    return primary_targets(target_ids).get(REFERENCE_FRAMEWORK)


def pairs(target_ids: Sequence[str]) -> list[tuple[str, tuple[str, str]]]:
    """Which targets are compared with which, and as what kind of finding."""
    out: list[tuple[str, tuple[str, str]]] = []
    ids = sorted(target_ids)
    primary = primary_targets(ids)
    for i, a in enumerate(ids):
        for b in ids[i + 1 :]:
            fa, da, ba = split_target_id(a)
            fb, db, bb = split_target_id(b)
            if fa != fb:
                continue
            if ba == bb:
                if da == ba or db == bb:  # a device against its own variant
                    out.append(("variant", (a, b)))
            elif da == ba and db == bb:
                out.append(("device", (a, b)))
    # Porting hazards are measured against the framework code is ported *from*: with torch
    # present, every other framework is compared with torch only (candle against burn would
    # repeat each of their differences from torch); without it, every pair.
    prim = sorted(primary.values())
    reference = primary.get(REFERENCE_FRAMEWORK)
    for i, a in enumerate(prim):
        for b in prim[i + 1 :]:
            if reference is None or reference in (a, b):
                out.append(("framework", (a, b)))
    return out
