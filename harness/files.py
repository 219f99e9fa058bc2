"""Atomic file writes: a reader (or a crash) never sees half a file."""

from __future__ import annotations

import os
from pathlib import Path


def atomic_write(path: str | Path, text: str | bytes) -> Path:
    """Writes ``text`` (UTF-8 text, or bytes as they are) to a temporary file beside ``path``,
    fsyncs it, then renames it over ``path``. On any error the temporary file is removed and
    ``path`` is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    data = text.encode("utf-8") if isinstance(text, str) else text
    try:
        # A fresh file (O_EXCL), never opened through a link: a link planted at the temporary
        # name would otherwise take the bytes to wherever it points.
        tmp.unlink(missing_ok=True)
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666),
                       "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path
