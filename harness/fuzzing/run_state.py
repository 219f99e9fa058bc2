"""What a run folder's ``campaign.json`` and journal lines must hold to be read: the shape of a
campaign state, of its saved configuration, and of a finding record (``harness.judging.finding``
owns the record's fields; this module says which of them a reader relies on, and of what type).

Every check names what is wrong in one line ("WHERE: KEY: what is wrong, found VALUE"), and raises
``CampaignError`` (``check_state``, ``check_config_keys``) or returns that line
(``record_problem``).
"""

from __future__ import annotations

import json
import math
import types
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from harness.errors import CampaignError


def _nonneg_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _epoch_seconds(v: Any) -> bool:
    """A time a calendar can show: seconds since the epoch from 1970 up to (not into) year 10000,
    which ``datetime`` can represent (the triage store and the reports write it as a date)."""
    return _number(v) and 0 <= v < 253402300800


def _dict_of_dicts(v: Any) -> bool:
    return isinstance(v, dict) and all(isinstance(x, dict) for x in v.values())


def _dict_of_str(v: Any) -> bool:
    return isinstance(v, dict) and all(isinstance(x, str) for x in v.values())


def _list_of_dicts(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, dict) for x in v)


# key -> (required, check, what it must be). Every key run_campaign (and the report) reads.
STATE_FIELDS: dict[str, tuple[bool, Any, str]] = {
    "config": (True, lambda v: isinstance(v, dict), "must be an object (the campaign's configuration)"),
    "next_chunk": (True, _nonneg_int, "must be a non-negative integer"),
    "programs": (True, _nonneg_int, "must be a non-negative integer"),
    "elapsed_s": (True, lambda v: _number(v) and v >= 0, "must be a non-negative number"),
    "runs": (True, _list_of_dicts, "must be a list of objects"),
    "targets": (True, _dict_of_dicts, "must be an object of target -> object"),
    "unavailable": (True, _dict_of_str, "must be an object of framework -> reason"),
    "started": (False, _epoch_seconds, "must be a number of seconds since the epoch (1970 to year 9999)"),
    "replayed": (False, _nonneg_int, "must be a non-negative integer"),
    "repeats_skipped": (False, _nonneg_int, "must be a non-negative integer"),
    "ran_nowhere": (False, _nonneg_int, "must be a non-negative integer"),
    "target_costs": (False, _dict_of_dicts, "must be an object of target -> {programs, probe_s}"),
    "machine": (False, lambda v: isinstance(v, dict), "must be an object"),
}


def _path_or_null(v: Any) -> bool:
    return v is None or isinstance(v, str)


# Fields of a finding record that something reads besides ``signature`` (which every record must
# have): checked when present. The paths (``finding.PATH_FIELDS``) name files of the run folder.
RECORD_FIELDS: dict[str, tuple[Any, str]] = {
    "status": (lambda v: isinstance(v, str), "must be a string"),
    "kind": (lambda v: isinstance(v, str), "must be a string"),
    "case": (_path_or_null, "must be a path (a string)"),
    "original_case": (_path_or_null, "must be a path (a string)"),
    "repro": (_path_or_null, "must be a path (a string) or null"),
    "shrink_seconds": (lambda v: v is None or _number(v), "must be a number or null"),
}

# What a resumed campaign reads of every finding (CampaignResult.new, the report): reconcile
# requires them, besides the signature every journal line has.
RESUME_REQUIRED = ("status", "kind")


def check_state(state: Any, where: str | Path) -> dict[str, Any]:
    """Checks the shape of a campaign state (``campaign.json``): every key the campaign reads has
    the right type, no key is unknown. Raises ``CampaignError`` "WHERE: KEY: what is wrong"."""
    if not isinstance(state, dict):
        raise CampaignError(f"{where}: not a campaign state (a JSON object), found {json_kind(state)}")
    for key in state:
        if key not in STATE_FIELDS:
            raise CampaignError(f"{where}: unknown key {key!r} (known: {', '.join(STATE_FIELDS)})")
    for key, (required, check, what) in STATE_FIELDS.items():
        if key not in state:
            if required:
                raise CampaignError(f"{where}: {key}: missing")
            continue
        if not check(state[key]):
            raise CampaignError(f"{where}: {key}: {what}, found {shown(state[key])}")
    return state


def check_config_keys(
    config: dict[str, Any], fields: dict[str, Any], *, where: str | Path = "campaign.json", required: Iterable[str] = ()
) -> dict[str, Any]:
    """Checks a saved configuration against the fields of the configuration class, e.g.
    ``check_config_keys(state["config"], typing.get_type_hints(CampaignConfig),
    where=folder.state_json, required=("out", "seed"))``: no unknown key, no required key
    missing, each value of its field's type (``int``, ``float``, ``str``, ``bool``, ``X | None``,
    ``list[str]``; a type it does not know is not checked). Raises ``CampaignError``
    "WHERE: config.KEY: ..."; returns ``config``."""
    if not isinstance(config, dict):
        raise CampaignError(f"{where}: config: must be an object, found {json_kind(config)}")
    for key in config:
        if key not in fields:
            raise CampaignError(f"{where}: config.{key}: unknown key (known: {', '.join(fields)})")
    for key in required:
        if key not in config:
            raise CampaignError(f"{where}: config.{key}: missing")
    for key, value in config.items():
        tp = fields[key]
        if not _is_instance(value, tp):
            raise CampaignError(f"{where}: config.{key}: must be {_type_name(tp)}, found {shown(value)}")
    return config


def record_problem(rec: dict[str, Any], required: Iterable[str] = ()) -> str | None:
    """What is wrong with a finding record read from the journal or ``findings.json`` (its
    signature, a ``required`` key missing, a ``RECORD_FIELDS`` field of the wrong type), or None."""
    if not isinstance(rec.get("signature"), str) or not rec["signature"]:
        return (
            "no signature (a non-empty string)"
            if "signature" not in rec
            else f"signature: must be a non-empty string, found {shown(rec['signature'])}"
        )
    for key in required:
        if key not in rec:
            return f"{key}: missing"
    for key, (check, what) in RECORD_FIELDS.items():
        if key in rec and not check(rec[key]):
            return f"{key}: {what}, found {shown(rec[key])}"
    return None


def utf8_text(raw: bytes, where: str | Path, what: str) -> str:
    """``raw`` as UTF-8 text; a ``CampaignError`` "WHERE: not UTF-8 (byte N): not WHAT"."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CampaignError(f"{where}: not UTF-8 (byte {e.start}): not {what}") from None


def _is_instance(value: Any, tp: Any) -> bool:
    if tp is Any or isinstance(tp, (str, typing.TypeVar)):
        return True  # a field whose type is unknown here is not checked
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return any(_is_instance(value, a) for a in typing.get_args(tp))
    if tp is None or tp is type(None):
        return value is None
    if origin is not None:  # list[str], dict[str, int], ...
        if not isinstance(value, origin if isinstance(origin, type) else object):
            return False
        args = typing.get_args(tp)
        if origin in (list, tuple, set, frozenset) and len(args) == 1:
            return all(_is_instance(v, args[0]) for v in value)
        if origin is dict and len(args) == 2:
            return all(_is_instance(k, args[0]) and _is_instance(v, args[1]) for k, v in value.items())
        return True
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(tp, type):
        return isinstance(value, tp)
    return True


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if tp is None or tp is type(None):
        return "null"
    if origin is not None:
        args = typing.get_args(tp)
        return f"a list of {_type_name(args[0])}" if origin is list and args else str(tp)
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    return names.get(tp, getattr(tp, "__name__", str(tp)))


def json_kind(v: Any) -> str:
    """What JSON type ``v`` is, in words ("an object", "a list", ...)."""
    return {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "true/false",
        type(None): "null",
        int: "a number",
        float: "a number",
    }.get(type(v), type(v).__name__)


def shown(v: Any) -> str:
    """``v`` as JSON text for a one-line message, cut to 40 characters."""
    text = json.dumps(v) if not isinstance(v, float) or math.isfinite(v) else str(v)
    return text if len(text) <= 40 else text[:37] + "..."
