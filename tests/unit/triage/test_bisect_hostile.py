"""``aliasfuzz bisect`` refuses what it cannot bisect with one line and exit status 2 (issue 40,
fault 17): a reversed range, an unpublished release, a ``--cache`` that is a file. Every input is
refused before anything is built or downloaded: the releases are listed from a real local HTTP
server holding a sparse index file (``ALIASFUZZ_CRATES_INDEX``), and any other request would go
through a proxy that does not exist.

The tests here run in this process, as the
unit tier requires; those that need real processes are in tests/e2e/test_bisect_hostile.py.
"""

from __future__ import annotations

import pytest

from harness.triage.bisect import BisectError, parse_versions

RELEASES = ["0.8.0", "0.9.1", "0.9.2", "0.10.0", "0.10.2", "0.11.1"]


def test_a_reversed_range_is_refused_before_the_releases_are_listed():
    with pytest.raises(BisectError, match="reversed"):
        parse_versions("0.11.1..0.9.1", lambda: pytest.fail("a reversed range needs no index"))


def test_an_unpublished_release_in_a_list_is_refused():
    with pytest.raises(BisectError, match="9.9.9 is not a published release"):
        parse_versions("0.9.1,9.9.9", lambda: RELEASES)
    with pytest.raises(BisectError, match="0.12.0 is not a published release"):
        parse_versions("0.9.1..0.12.0", lambda: RELEASES)
