"""What both tiers of the campaign options tests share: ``FUZZ``."""

from __future__ import annotations

FUZZ = (
    "fuzz",
    "--targets",
    "candle",
    "--profile",
    "quick",
    "--seed",
    "5",
    "--confirm",
    "0",
    "--shrink-time",
    "2",
    "--no-report",
)
