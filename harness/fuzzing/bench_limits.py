"""The two limits ``aliasfuzz bench`` measures the engine against, besides the ``@given`` ceiling:

- ``draw``: the ``programs()`` strategy drawn as the engine draws it (``generation.generate``: one
  ``ConjectureData`` per program inside a build context, as Hypothesis's runner makes one per
  example, without the runner's per-example bookkeeping): the engine's generation ceiling;
- ``target_bound``: the cores of this machine divided by the CPU the targets themselves spend on
  a program (the engine run's ``cpu_ms_per_program``, the worker left out): the most programs a
  second the targets could run here if the worker cost nothing;
- ``machine_bound``: the cores divided by the CPU the worker *and* the targets spend on a
  program: the most programs a second one worker could run here with every core busy, at
  today's costs. It names the limit that binds: the engine cannot be more than
  ``machine_bound / target_bound`` (the targets' share of the CPU a program costs) of the
  target-bound limit, nor more than ``machine_bound / ceiling`` of the ``@given`` ceiling, however
  well it overlaps; only a cheaper worker or cheaper targets raise those.

Each is a rate in distinct programs a second, as every throughput figure of the benchmark is.

And what the metamorphic variants cost (``variant_figures``): the engine timed in the same round
with ``metamorphic_share = 0``, so the share of drawn programs that also run beside a variant
(0.25 by default, the campaign's) is the only difference.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

#: What the engine is held to (a benchmark's figures, never a timed test): at least this share of
#: the target-bound limit, and at least this multiple of the ``@given`` ceiling.
TARGET_BOUND_TARGET = 0.5
CEILING_TARGET = 1.0


def limit_figures(fig: dict[str, Any], log: Callable[[str], None]) -> None:
    """``target_bound_pps`` and ``machine_bound_pps``, the engine as a fraction of each limit
    (``ratio_draw``, taken per round as ``ratio_ceiling`` is, ``ratio_target_bound``,
    ``ratio_machine_bound``), and the most the two judged ratios can reach at these costs
    (``max_ratio_target_bound``, ``max_ratio_ceiling``), from the figures already in ``fig``; all
    but ``ratio_draw`` are None when the targets' CPU was too small to measure."""
    targets_ms = sum(v for k, v in fig["cpu_ms_per_program"].items() if k != "worker")
    cores = os.cpu_count() or 1
    runs = sorted(e / d for e, d in zip(fig["engine_pps_runs"], fig["draw_pps_runs"]))
    fig["ratio_draw"] = runs[len(runs) // 2]
    log(
        f"(d) direct draw (the strategy):  {fig['draw_pps']:8.1f} programs/s; the engine is {fig['ratio_draw']:.2f} of it"
    )
    if targets_ms <= 0:  # a run too short for the CPU clock's ticks: no limit to report
        for key in (
            "target_bound_pps",
            "ratio_target_bound",
            "machine_bound_pps",
            "ratio_machine_bound",
            "max_ratio_target_bound",
            "max_ratio_ceiling",
        ):
            fig[key] = None
        log("(e) target-bound: not measured (the targets' CPU is below the clock's resolution: run more programs)")
        return
    fig["target_bound_pps"] = cores / (targets_ms / 1e3)
    fig["ratio_target_bound"] = fig["engine_pps"] / fig["target_bound_pps"]
    log(
        f"(e) target-bound ({cores} cores / {targets_ms:.2f} ms of target CPU per program): "
        f"{fig['target_bound_pps']:8.1f} programs/s; the engine is {fig['ratio_target_bound']:.2f} of it "
        f"(target >= {TARGET_BOUND_TARGET})"
    )
    worker_ms = fig["cpu_ms_per_program"].get("worker", 0.0)
    fig["machine_bound_pps"] = cores / ((worker_ms + targets_ms) / 1e3)
    fig["max_ratio_target_bound"] = fig["machine_bound_pps"] / fig["target_bound_pps"]
    fig["max_ratio_ceiling"] = fig["machine_bound_pps"] / fig["ceiling_pps"]
    fig["ratio_machine_bound"] = fig["engine_pps"] / fig["machine_bound_pps"]
    log(
        f"(g) machine-bound ({cores} cores / {worker_ms:.2f} + {targets_ms:.2f} ms of worker and target CPU): "
        f"{fig['machine_bound_pps']:8.1f} programs/s; the engine is {fig['ratio_machine_bound']:.2f} of it, so at "
        f"these costs (b)/(e) can reach {fig['max_ratio_target_bound']:.2f} and (b)/(a) {fig['max_ratio_ceiling']:.2f}"
    )


class VariantCost:
    """Times the engine with its metamorphic variants and without them (``metamorphic_share``
    set to 0 for the second run), on the same programs, and counts the variants the first runs
    ran."""

    def __init__(self, engine):
        self.engine = engine
        self.share = engine.metamorphic_share
        self.variants = self.programs = 0

    def measure(self, measure: Callable[[Any], tuple]) -> tuple[tuple, tuple]:
        """``measure(engine)`` with the variants, then without them."""
        e = self.engine
        variants, programs = e.variants_run, e.programs_run
        with_variants = measure(e)
        self.variants += e.variants_run - variants
        self.programs += e.programs_run - programs
        e.metamorphic_share = 0.0
        try:
            return with_variants, measure(e)
        finally:
            e.metamorphic_share = self.share

    def figures(self, fig: dict[str, Any], log: Callable[[str], None]) -> None:
        """``variants_per_program`` (variants run per drawn program) and ``variant_cost``: the
        engine's programs a second without variants over with them, less 1, per round (the
        middle one), i.e. how much longer a chunk takes for its variants."""
        runs = sorted(n / e - 1 for e, n in zip(fig["engine_pps_runs"], fig["engine_no_variants_pps_runs"]))
        fig["variant_cost"] = runs[len(runs) // 2]
        fig["variants_per_program"] = self.variants / self.programs if self.programs else 0.0
        log(
            f"(f) metamorphic variants (share {self.share:g}): {fig['variants_per_program']:.2f} per drawn program; "
            f"the engine runs {fig['engine_no_variants_pps']:.1f} programs/s without them: they cost "
            f"{fig['variant_cost'] * 100:+.0f}% of a chunk's time"
        )
