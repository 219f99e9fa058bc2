"""``aliasfuzz targets``: the targets this machine offers, with their versions."""

from __future__ import annotations

import argparse
import json

from harness.cli.exits import EXIT_OK


def register(sub) -> None:
    p = sub.add_parser("targets", help="list the targets available on this machine")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_targets)


def cmd_targets(args: argparse.Namespace) -> int:
    from harness.targets.registry import discover

    # Every device, the on-request ones too (PROTOCOL.md): they exist here, if only by their id.
    with discover(every_device=True) as found:
        if args.json:
            print(
                json.dumps(
                    {"targets": [t.info.to_json() for t in found.targets], "unavailable": found.unavailable}, indent=2
                )
            )
            return EXIT_OK
        from rich.console import Console
        from rich.table import Table

        table = Table(title="aliasfuzz targets")
        for col in ("target", "kind", "alt device", "versions", "ops", "methods"):
            table.add_column(col)
        for t in found.targets:
            i = t.info
            table.add_row(
                i.id,
                i.kind + (" (on request: name it in --targets)" if i.on_request else ""),
                i.alt or "—",
                ", ".join(f"{k} {v}" for k, v in i.versions.items()),
                str(len(i.ops)),
                str(len(i.methods)),
            )
        Console().print(table)
        for fw, why in found.unavailable.items():
            print(f"not available: {fw}: {why}")
    return EXIT_OK
