"""Confirm before report: a new finding's minimized case is re-run on freshly started probe
processes (``Engine.confirm``); one that does not show every time is ``flaky``, reported in its own
section and not a failure. On the TEST DOUBLE fake probe (tests/fakes/fake_probe.py), whose
``--planted-after N`` makes its planted bug depend on what the process ran before.

The tests here run in this process, as the
unit tier requires; those that need real processes are in tests/e2e/test_confirm.py.
"""

from __future__ import annotations


def test_junit_shows_a_flaky_finding_as_skipped_not_failed():
    from harness.reporting.junit import junit_xml

    xml = junit_xml(
        [
            {
                "signature": "s1",
                "kind": "device",
                "status": "flaky",
                "sentence": "it moved",
                "confirmed": 1,
                "confirm_runs": 3,
            },
            {"signature": "s2", "kind": "device", "status": "new", "sentence": "it moved too"},
        ]
    )
    assert 'failures="1"' in xml and 'skipped="1"' in xml
    assert 'message="flaky (shown in 1 of 3 runs on fresh probe processes): it moved"' in xml
