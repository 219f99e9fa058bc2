"""Target discovery: which frameworks exist (one plugin module each) and which devices they open.

A framework plugin is a module with ``FRAMEWORK``, ``RELEASE_PACKAGE``, ``BUILD_HINT``, ``CWD``,
``command()`` and ``REPRODUCER_SCAFFOLD``; the process it starts speaks the probe protocol and
names its devices in the handshake. Adding a framework means adding one module here and one line
to ``PLUGINS``: nothing else in the harness names a framework, but for torch, the reference.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import ModuleType

from harness.paths import probe_hint
from harness.targets import burn, candle, torch
from harness.targets.base import ProbeProcess, SetupError, Target, TargetInfo
from harness.targets.runner import Runner
from harness.targets.rust_reproducer import Scaffold

PLUGINS: tuple[ModuleType, ...] = (torch, candle, burn)
#: The frameworks' names, as target ids and handshakes' versions spell them.
FRAMEWORKS: tuple[str, ...] = tuple(p.FRAMEWORK for p in PLUGINS)
#: framework -> the package whose version is the framework's version.
RELEASE_PACKAGE: dict[str, str] = {p.FRAMEWORK: p.RELEASE_PACKAGE for p in PLUGINS}
#: framework -> what wraps its probe's transcript into a cargo reproducer, for the frameworks whose
#: reproducer is a Rust program (the ones a bisection can pin to a crates.io release).
RUST_SCAFFOLDS: dict[str, Scaffold] = {p.FRAMEWORK: p.REPRODUCER_SCAFFOLD for p in PLUGINS if p.REPRODUCER_SCAFFOLD}


@dataclass
class Discovery:
    targets: list[Target] = field(default_factory=list)
    unavailable: dict[str, str] = field(default_factory=dict)  # framework -> why
    #: framework -> the fix for its probe that did not start (``paths.probe_hint``: the plugin's
    #: ``BUILD_HINT``, or the prebuilt folder it came from).
    hints: dict[str, str] = field(default_factory=dict)

    def close(self) -> None:
        for t in self.targets:
            t.close()

    def missing_error(self) -> SetupError | None:
        """With every framework wanted (no ``--targets``), the frameworks the set-up should
        have provided and that did not start, as one line naming each, why, and the fix; None
        when every one started. (Only an explicit target list may leave a framework out.)"""
        if not self.unavailable:
            return None
        hints = {p.FRAMEWORK: p.BUILD_HINT for p in PLUGINS} | self.hints
        fixes = []
        for fw in self.unavailable:
            m = re.search(r"`[^`]+`", hints.get(fw, ""))
            fix = f"run {m.group(0)}" if m else hints.get(fw, "")
            if fix and fix not in fixes:
                fixes.append(fix)
        have = list(dict.fromkeys(t.info.framework for t in self.targets))
        named = [f"{fw} ({_why(fw, msg, hints.get(fw))})" for fw, msg in self.unavailable.items()]
        one = len(named) == 1
        narrow = f", or pass --targets {','.join(have)} to run without {'it' if one else 'them'}" if have else ""
        return SetupError(
            f"{_and(named)} {'is' if one else 'are'} not available: {_and(fixes) or 'rebuild it'}{narrow}"
        )

    def require_all(self) -> Discovery:
        """Closes the targets and raises ``missing_error`` if there is one; else returns self."""
        error = self.missing_error()
        if error is not None:
            self.close()
            raise error
        return self

    def __enter__(self) -> Discovery:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _and(items: list[str]) -> str:
    return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else "".join(items)


def _why(fw: str, message: str, hint: str | None = None) -> str:
    """A process's one-line error less its leading ``framework:`` and a closing hint in
    parentheses, a command's or ``hint`` (the sentence names the framework and the fix)."""
    message = message[len(fw) + 2 :] if message.startswith(f"{fw}: ") else message
    if hint and message.endswith(f" ({hint})"):
        return message[: -len(hint) - 3]
    return re.sub(r" \([^()]*`[^`]+`[^()]*\)$", "", message)


def open_runner(wanted: Iterable[str] | None = None, *, start_by: float | None = None, every_device: bool = False):
    """Discovers the wanted targets and returns a ``Runner`` over them plus the discovery (for
    what was unavailable). ``SetupError`` when no target is left, and, when ``wanted`` is None
    (every framework), when any framework is unavailable (``Discovery.missing_error``): a
    missing probe must not narrow a default run silently. ``start_by`` (``time.monotonic()``) and
    ``every_device`` (the on-request devices too): see ``discover``."""

    found = discover(wanted, start_by=start_by, every_device=every_device)
    if wanted is None:
        found.require_all()
    if not found.targets:
        found.close()
        why = "; ".join(f"{fw}: {msg}" for fw, msg in found.unavailable.items())
        raise SetupError("no target is available" + (f" ({why})" if why else " (run `aliasfuzz targets`)"))
    return Runner(found.targets), found


def parse_target_list(text: str | None) -> list[str] | None:
    if not text:
        return None
    ids = [t.strip() for t in text.split(",") if t.strip()]
    for t in ids:
        if ":" not in t and t not in {p.FRAMEWORK for p in PLUGINS}:
            raise SetupError(f"--targets: {t!r} is not framework:device (e.g. torch:cpu) or a framework name")
    return ids


def _wanted(target_id: str, wanted: list[str] | None, on_request: bool = False) -> bool:
    """Whether ``wanted`` (None: every target) asks for the target; an on-request one only by its id."""
    if on_request:
        return wanted is not None and target_id in wanted
    if wanted is None:
        return True
    framework = target_id.split(":", 1)[0]
    return target_id in wanted or framework in wanted


def discover(
    wanted: Iterable[str] | None = None,
    *,
    timeout_s: float = 20.0,
    env: dict[str, str] | None = None,
    start_by: float | None = None,
    every_device: bool = False,
) -> Discovery:
    """Starts each framework's process once, reads its handshake and returns one ``Target`` per
    device (variants included). With ``wanted``, only those ids or frameworks; a wanted target
    that does not exist is a ``SetupError``. With ``start_by`` (``time.monotonic()``, when a
    campaign's time is up: budget, shrink grace and drain) no handshake is waited for past it: a
    probe that has not answered by then is unavailable ("no handshake ... when the campaign's
    time was up"). An on-request device (PROTOCOL.md: ``torch:cpu+inductor``) is a target only
    where ``wanted`` names its id, or with ``every_device`` (what ``aliasfuzz targets`` lists)."""
    wanted = list(wanted) if wanted is not None else None
    found = Discovery()
    proc_env = {**os.environ, **(env or {})}
    for plugin in PLUGINS:
        fw = plugin.FRAMEWORK
        if wanted is not None and not any(w == fw or w.startswith(fw + ":") for w in wanted):
            continue
        first = ProbeProcess(fw, plugin.command(), cwd=plugin.CWD, env=proc_env, timeout_s=timeout_s)
        try:
            hello = first.start(timeout_s=None if start_by is None else start_by - time.monotonic())
        except SetupError as e:
            # A probe the campaign's time ran out on is no missing build: no hint to build it.
            fix = found.hints[fw] = probe_hint(plugin.BUILD_HINT, proc_env)
            hint = fix not in str(e) and "make" not in str(e) and "when the campaign's time was up" not in str(e)
            found.unavailable[fw] = f"{e} ({fix})" if hint else str(e)
            continue
        used_first = False
        for dev in hello["devices"]:
            tid = f"{fw}:{dev['name']}"
            on_request = bool(dev.get("on_request"))
            if not (every_device or _wanted(tid, wanted, on_request)):
                continue
            info = TargetInfo(
                tid,
                fw,
                dev["name"],
                dev.get("alt"),
                dev.get("kind", "cpu"),
                dict(hello.get("versions", {})),
                tuple(hello.get("ops", ())),
                tuple(hello.get("methods", ())),
                tuple(dev["differs_on"]) if dev.get("differs_on") is not None else None,
                on_request,
            )
            if used_first:
                proc = ProbeProcess(
                    f"{fw}:{dev['name']}", plugin.command(), cwd=plugin.CWD, env=proc_env, timeout_s=timeout_s
                )
                proc.hello = hello  # started on first use
            else:
                proc, used_first = first, True
                proc.name = tid
            # A device whose programs may take longer than the harness waits (Inductor's first
            # compile in a process) says how long one may take (PROTOCOL.md).
            proc.timeout_s = max(timeout_s, float(dev.get("program_timeout_s") or 0.0))
            found.targets.append(Target(info, proc))
        if not used_first:
            first.stop()
    if wanted is not None:
        have = {t.id for t in found.targets}
        for w in wanted:
            if ":" in w and w not in have:
                fw = w.split(":", 1)[0]
                why = found.unavailable.get(fw, "that framework does not offer this device here")
                found.close()
                raise SetupError(f"target {w} is not available: {why}")
            if ":" not in w and w in found.unavailable:
                found.close()
                raise SetupError(f"framework {w} is not available: {found.unavailable[w]}")
    return found
