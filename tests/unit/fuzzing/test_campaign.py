"""Campaigns through the real command line: kill -9 and resume, exit statuses, JUnit, seeds.

Findings come fast from the TEST DOUBLE fake probe (tests/fakes/fake_probe.py, which has one
planted aliasing bug on its ``planted`` device), put in place of the candle probe binary with
``ALIASFUZZ_PROBE_DIR``: ``--targets candle`` then means ``candle:ref`` and ``candle:planted``,
both fakes. The harness code under test is the real one.

The tests here run in this process, as the
unit tier requires; those that need real processes are in tests/e2e/test_campaign.py.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET


def test_junit_known_and_new(tmp_path):
    from harness.reporting.junit import write_junit

    path = write_junit(
        [
            {"signature": "a|b", "status": "new", "kind": "device", "sentence": "x & <y>", "case": "c.toml"},
            {"signature": "c|d", "status": "known", "baseline": "K1", "kind": "framework", "sentence": "z"},
            {"signature": "a|b", "status": "new"},
        ],
        tmp_path / "sub" / "j.xml",
    )
    root = ET.parse(path).getroot()
    cases = root.findall(".//testcase")
    assert [c.get("name") for c in cases] == ["a|b", "c|d"]
    assert cases[0].find("failure") is not None and cases[1].find("failure") is None
    assert "K1" in cases[1].find("system-out").text
    assert not list(tmp_path.glob("sub/.*tmp"))
