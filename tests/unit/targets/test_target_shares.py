"""A variant's share of a campaign (``Profile.variant_shares``, ``runner.in_share``): which
programs a costly variant runs is decided by each program's key, so it is the same wherever the
program is drawn, and the share is what the profile says. That the runner sends a variant only
those programs is in tests/probes/test_engine_real.py."""

from __future__ import annotations

from generators.profiles import COMPILE_SHARE, PROFILES
from harness.fuzzing.generation import generate
from harness.targets.runner import in_share

PROGRAMS = generate(2000, 7, "quick")


def test_a_share_picks_about_that_share_of_programs_and_the_same_ones_every_time():
    for share in (0.1, 0.5):
        picked = [p.key() for p in PROGRAMS if in_share(p, share)]
        assert abs(len(picked) / len(PROGRAMS) - share) < 0.04, (share, len(picked))
        assert picked == [p.key() for p in PROGRAMS if in_share(p, share)]
    # a larger share keeps the programs of a smaller one
    assert {p.key() for p in PROGRAMS if in_share(p, 0.1)} <= {p.key() for p in PROGRAMS if in_share(p, 0.5)}
    assert all(in_share(p, 1.0) for p in PROGRAMS) and not any(in_share(p, 0.0) for p in PROGRAMS)


def test_the_compile_variant_has_a_share_in_every_profile_and_all_of_the_compile_profile():
    for name, profile in PROFILES.items():
        shares = dict(profile.variant_shares)
        assert shares["compile"] == (1.0 if name == "compile" else COMPILE_SHARE), name
