"""The harness's own error types, shared by the stages that raise them.

Every ``InputError`` is one line that names the file (and field) at fault; the command line prints
it after ``aliasfuzz: `` and exits with status 2. Anything else raised inside the harness is a
harness error: a bug of aliasfuzz, never a finding about a framework.
"""

from __future__ import annotations


class InputError(RuntimeError):
    """Bad input or an unusable set-up: one line, exit status 2."""


class CampaignError(InputError):
    """A usage or set-up problem with a campaign or its run folder."""
