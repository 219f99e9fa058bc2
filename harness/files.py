"""Writing files aliasfuzz owns: atomic writes (a reader, or a crash, never sees half a file) and
the check of an output path the user names (``output_file_problem``), made before any work."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _not_regular(path: Path) -> str | None:
    """What ``path`` is (links followed) when it exists and is not a regular file, else None."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None  # absent (or a dangling link, which the rename replaces): a new file
    if stat.S_ISREG(st.st_mode):
        return None
    return _kind(st.st_mode)


def output_file_problem(path: str | Path) -> str | None:
    """Why ``path`` cannot take a file that aliasfuzz writes whole (``atomic_write``), or None.
    It may be absent or a regular file (or a link to one) in an existing, writable folder; never
    a device, a FIFO, a socket or a folder: writing the file renames a new one over the path, so
    ``/dev/null`` would be replaced by a regular file (as root that breaks the system) and a FIFO
    a program reads from would be gone. Checked before the work whose result it takes."""
    path = Path(path)
    try:
        kind = _not_regular(path)
    except OSError as e:
        return f"cannot be looked at ({e.strerror or e})"
    if kind is not None:
        return f"{kind}, not a regular file: give the path of a file to write"
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        return f"folder {parent} does not exist"
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        return "not writable"
    return None


def atomic_write(path: str | Path, text: str | bytes) -> Path:
    """Writes ``text`` (UTF-8 text, or bytes as they are) to a temporary file beside ``path``,
    fsyncs it, then renames it over ``path``. On any error the temporary file is removed and
    ``path`` is left as it was. Raises ``OSError`` "not a regular file" when ``path`` (links
    followed) is a device, a FIFO or a socket: the rename would replace it."""
    path = Path(path)
    kind = _not_regular(path)
    if kind is not None and kind != "a folder":  # a folder: the rename fails by itself (EISDIR)
        raise OSError(errno.EINVAL, f"{kind}, not a regular file", str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    data = text.encode("utf-8") if isinstance(text, str) else text
    try:
        # A fresh file (O_EXCL), never opened through a link: a link planted at the temporary
        # name would otherwise take the bytes to wherever it points.
        tmp.unlink(missing_ok=True)
        with os.fdopen(
            os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666), "wb"
        ) as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path
