"""Passwords in URLs (``--db redis://:PASSWORD@host:port/n``, ``--triage``, ``--store``, a shared
campaign's ``redis://.../n/NAME``) are never stored or shown: ``hide_password`` is the one mask,
applied to every URL before it is written to a file (``campaign.json``, the reports, a bug
report) or printed in a message. The nightly passes the URL from a secret and uploads
``reports/``, so a password written anywhere there would end up in a public artifact.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

#: What a hidden password reads as.
HIDDEN = "***"

# scheme://user:password@ : the user (no ':' or '@') is kept, the password goes. The password
# runs to the last '@' before the end of the authority ('/', '?', '#' or a space): that is where
# ``urlsplit`` (and so the Redis client) ends it, so a password holding an '@' is hidden whole.
_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^\s/?#@:]*):[^\s/?#]*@")


def hide_password(text: str) -> str:
    """``text`` (a URL, or any text with URLs in it: a message, a command line) with the password
    of each URL shown as ``***`` (``redis://:s3cret@host:6379/0`` -> ``redis://:***@host:6379/0``,
    ``redis://me:s3cret@host/0`` -> ``redis://me:***@host/0``)."""
    return _USERINFO.sub(lambda m: f"{m.group('head')}:{HIDDEN}@", text)


def has_hidden_password(url: str | None) -> bool:
    """Whether ``url`` is one that ``hide_password`` masked: its password is gone, so it must be
    given again to be used (a resumed campaign's ``--db`` read back from ``campaign.json``)."""
    if not url:
        return False
    try:
        return urlsplit(url).password == HIDDEN
    except ValueError:
        return False
