"""The two limits ``aliasfuzz bench`` measures the engine against, besides the ``@given`` ceiling:

- ``draw``: the ``programs()`` strategy drawn as the engine draws it (``generation.generate``: one
  ``ConjectureData`` per program inside a build context, as Hypothesis's runner makes one per
  example, without the runner's per-example bookkeeping): the engine's generation ceiling;
- ``target_bound``: the cores of this machine divided by the CPU the targets themselves spend on
  a program (the engine run's ``cpu_ms_per_program``, the worker left out): the most programs a
  second the targets could run here if the worker cost nothing.

Each is a rate in distinct programs a second, as every throughput figure of the benchmark is.

And what the metamorphic variants cost (``variant_figures``): the engine timed in the same round
with ``metamorphic_share = 0``, so the share of drawn programs that also run beside a variant
(0.25 by default, the campaign's) is the only difference.
"""

from __future__ import annotations

import os
from typing import Any, Callable


def limit_figures(fig: dict[str, Any], log: Callable[[str], None]) -> None:
    """``target_bound_pps`` and the engine as a fraction of each limit (``ratio_draw``, taken per
    round as ``ratio_ceiling`` is, and ``ratio_target_bound``), from the figures already in ``fig``;
    the target-bound ones are None when the targets' CPU was too small to measure."""
    targets_ms = sum(v for k, v in fig["cpu_ms_per_program"].items() if k != "worker")
    cores = os.cpu_count() or 1
    runs = sorted(e / d for e, d in zip(fig["engine_pps_runs"], fig["draw_pps_runs"]))
    fig["ratio_draw"] = runs[len(runs) // 2]
    log(f"(d) direct draw (the strategy):  {fig['draw_pps']:8.1f} programs/s; the engine is {fig['ratio_draw']:.2f} of it")
    if targets_ms <= 0:  # a run too short for the CPU clock's ticks: no limit to report
        fig["target_bound_pps"] = fig["ratio_target_bound"] = None
        log("(e) target-bound: not measured (the targets' CPU is below the clock's resolution: run more programs)")
        return
    fig["target_bound_pps"] = cores / (targets_ms / 1e3)
    fig["ratio_target_bound"] = fig["engine_pps"] / fig["target_bound_pps"]
    log(f"(e) target-bound ({cores} cores / {targets_ms:.2f} ms of target CPU per program): "
        f"{fig['target_bound_pps']:8.1f} programs/s; the engine is {fig['ratio_target_bound']:.2f} of it")


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
        log(f"(f) metamorphic variants (share {self.share:g}): {fig['variants_per_program']:.2f} per drawn program; "
            f"the engine runs {fig['engine_no_variants_pps']:.1f} programs/s without them: they cost "
            f"{fig['variant_cost'] * 100:+.0f}% of a chunk's time")
