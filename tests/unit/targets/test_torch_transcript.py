"""The torch target's transcript: the calls it made, as the source it ran, returned by a ``run``
request that asks for it (PROTOCOL.md), and the reproducer made of it.

The tests here run in this process, as the
unit tier requires; those that need the real frameworks are in tests/probes/test_torch_transcript.py.
"""

from __future__ import annotations

import pytest

from harness.targets.protocol import Malformed, parse_request


def test_a_transcript_field_that_is_not_a_boolean_is_malformed():
    with pytest.raises(Malformed, match="transcript"):
        parse_request(
            b'{"type": "run", "id": 1, "device": "cpu", "program": {"tensors": [], "ops": []}, "transcript": "yes"}'
        )
