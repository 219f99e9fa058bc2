"""One campaign over many machines (``fuzz --campaign NAME --db redis://``): three ``aliasfuzz
fuzz`` processes, each with its own run folder and probes, stand in for three machines on one
real ``redis-server``; one is killed with SIGKILL while it holds a chunk. What Redis holds
afterwards is the evidence: every chunk done once, the dead machine's chunk re-issued, every
finding shrunk once. The target is the TEST DOUBLE fake probe (tests/e2e/test_campaign.py
``fake_probe_dir``), which stands in for no framework.

The tests here run in this process, as the
unit tier requires; those that need real processes are in tests/e2e/test_shared_campaign.py.
"""

from __future__ import annotations

CHUNK, CHUNKS = 8, 24
NAME = "nightly"


def test_without_a_campaign_the_saved_config_is_unchanged():
    from harness.fuzzing.campaign import CampaignConfig

    doc = CampaignConfig(out="x", seed=1).to_json()
    assert "campaign" not in doc and "lease_s" not in doc
    shared = CampaignConfig(out="x", seed=1, campaign="c", lease_s=5.0).to_json()
    assert (shared["campaign"], shared["lease_s"]) == ("c", 5.0)
