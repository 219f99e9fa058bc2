"""The campaign options that make a campaign what it is, checked by one function wherever they
come from: the command line (``aliasfuzz fuzz``, ``aliasfuzz bench``), a resumed run folder's
``campaign.json`` and a shared campaign's configuration read from Redis
(``shared_campaign.check_config``). Each caller names where the value came from (the flag, the
file and field, the Redis key and field); what is wrong with it is said the same way everywhere,
so a joining machine accepts from Redis exactly what it accepts from its own command line."""

from __future__ import annotations

import math
from typing import Any

from generators.profiles import PROFILES
from harness.targets.base import SetupError
from harness.targets.registry import parse_target_list

__all__ = ["MAX_CHUNK_SIZE", "option_problem"]

#: The most programs one chunk may hold (``--chunk-size``). A chunk is drawn whole before any of
#: it runs, the pipeline draws chunks ahead, and the budget is looked at between chunks: a bigger
#: one holds up the budget (drawing takes about 3 ms a program) and memory (every program and its
#: choices are kept until it is judged).
MAX_CHUNK_SIZE = 1024


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def option_problem(key: str, value: Any) -> str | None:
    """What is wrong with ``value`` as the campaign option ``key`` (a
    ``shared_campaign.SHARED_OPTIONS`` key: seed, profile, targets, chunk_size, budget_s,
    max_programs, metamorphic_share), or None when it is a value a campaign can run with. The
    message says what the value must be; the caller prefixes where it came from."""
    if key == "seed":
        return None if _integer(value) else "must be an integer"
    if key == "profile":
        return None if isinstance(value, str) and value in PROFILES else f"must be one of {', '.join(PROFILES)}"
    if key == "targets":
        return _targets_problem(value)
    if key == "chunk_size":
        return (
            None
            if _integer(value) and 1 <= value <= MAX_CHUNK_SIZE
            else f"must be an integer from 1 to {MAX_CHUNK_SIZE} (programs drawn and run as one batch)"
        )
    if key == "budget_s":
        return (
            None
            if value is None or (_finite(value) and value >= 0)
            else "must be a finite number of seconds, 0 or more"
        )
    if key == "max_programs":
        return None if value is None or (_integer(value) and value >= 1) else "must be an integer, at least 1"
    if key == "metamorphic_share":
        return None if _finite(value) and 0 <= value <= 1 else "must be a share from 0 to 1"
    raise KeyError(key)  # a bug of the caller: not a campaign option


def _targets_problem(value: Any) -> str | None:

    if value is None:
        return None  # every target
    what = "must be a non-empty list of target ids or frameworks (torch:cpu, candle, ...), or null"
    if not isinstance(value, list) or not value or not all(isinstance(t, str) for t in value):
        return what
    try:  # each one as --targets would take it, and nothing it would split or trim
        if parse_target_list(",".join(value)) != value:
            return what
    except SetupError as e:
        return str(e).removeprefix("--targets: ")
    return None
