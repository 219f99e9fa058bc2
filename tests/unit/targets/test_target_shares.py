"""A costly target's share of a campaign (``Profile.target_shares``, ``runner.in_share``): which
programs a variant or a costly device runs is decided by each program's key, so it is the same
wherever the program is drawn, and the share is what the profile says. That the runner sends such
a target only those programs is in tests/probes/test_engine_real.py."""

from __future__ import annotations

from generators.profiles import COMPILE_SHARE, GRAPH_SHARE, PROFILES, WGPU_SHARE
from harness.fuzzing.generation import generate
from harness.targets.runner import in_share, share_key

PROGRAMS = generate(2000, 7, "quick")


def test_a_share_picks_about_that_share_of_programs_and_the_same_ones_every_time():
    for share in (0.1, 0.5):
        picked = [p.key() for p in PROGRAMS if in_share(p, share)]
        assert abs(len(picked) / len(PROGRAMS) - share) < 0.04, (share, len(picked))
        assert picked == [p.key() for p in PROGRAMS if in_share(p, share)]
    # a larger share keeps the programs of a smaller one
    assert {p.key() for p in PROGRAMS if in_share(p, 0.1)} <= {p.key() for p in PROGRAMS if in_share(p, 0.5)}
    assert all(in_share(p, 1.0) for p in PROGRAMS) and not any(in_share(p, 0.0) for p in PROGRAMS)


def test_the_compiling_variants_have_a_share_in_every_profile_and_all_of_the_compile_profile():
    for name, profile in PROFILES.items():
        shares = dict(profile.target_shares)
        assert shares["compile"] == (1.0 if name == "compile" else COMPILE_SHARE), name
        assert shares["graph"] == (1.0 if name == "compile" else GRAPH_SHARE), name
    assert share_key("torch:cpu+graph") == "graph"


def test_burn_wgpu_has_its_share_in_every_profile_but_devices_and_a_share_is_keyed_by_variant_or_device():
    for name, profile in PROFILES.items():
        assert dict(profile.target_shares).get("burn:wgpu") == (None if name == "devices" else WGPU_SHARE), name
    assert 0 < WGPU_SHARE < 1
    assert share_key("torch:cpu+compile") == share_key("torch:cuda+compile") == "compile"
    assert share_key("burn:wgpu") == "burn:wgpu"
