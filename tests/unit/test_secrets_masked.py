"""A Redis password is never stored or shown (``harness.urls.hide_password``): a shared campaign
run against a real ``redis-server`` that requires a password, with the password in every URL
(``--db``, ``--triage``, ``report redis://.../NAME``), leaves it in no file of the run folders,
of the triage store beside them, of a bug report, and in no line the commands print. The nightly
passes the URL from a secret and uploads ``reports/``. The findings come from the TEST DOUBLE
fake probe (tests/e2e/test_campaign.py ``fake_probe_dir``), which stands in for no framework.

The tests here run in this process, as the
unit tier requires; those that need real processes are in tests/e2e/test_secrets_masked.py.
"""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    "text, shown",
    [
        ("redis://:pw@h:6379/0", "redis://:***@h:6379/0"),
        ("redis://me:pw@h/0/nightly", "redis://me:***@h/0/nightly"),
        ("rediss://:p@ss@h:1/2", "rediss://:***@h:1/2"),  # an '@' in the password: hidden whole
        (
            "fuzz --db redis://:a@h/0 --triage redis://u:b@h/1 --out x@y",
            "fuzz --db redis://:***@h/0 --triage redis://u:***@h/1 --out x@y",
        ),
        ("--db=redis://:pw@h/0", "--db=redis://:***@h/0"),
        ("redis://h:6379/0", "redis://h:6379/0"),  # no password: unchanged
    ],
)
def test_hide_password_hides_every_password_and_nothing_else(text, shown):
    from harness.urls import hide_password

    assert hide_password(text) == shown
