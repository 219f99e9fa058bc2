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
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path
