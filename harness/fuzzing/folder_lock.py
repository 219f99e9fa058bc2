"""A run folder's lock: an exclusive ``flock`` on ``campaign.lock``, held for as long as a
campaign runs; the kernel drops it when the process dies, however it dies. The lock file holds
the holder's pid, for the message a second campaign gets. The lock file is never opened through a
symbolic link (``O_NOFOLLOW``): truncating it and writing the pid would land in the file it points
to (``RunFolder.refuse_links`` refuses such a link first, with a clearer message)."""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from harness.errors import CampaignError


def _why(e: OSError) -> str:
    return e.strerror or str(e)


class FolderLock:
    """The lock of the run folder ``folder`` (its file ``lock_file``). Re-entrant on this object;
    one descriptor, never inherited by child processes (``O_CLOEXEC``)."""

    def __init__(self, folder: Path, lock_file: Path):
        self.folder = folder
        self.lock_file = lock_file
        self._fd: int | None = None
        self._depth = 0

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Takes the lock without waiting. Raises ``CampaignError`` "DIR: in use by another
        campaign (pid N)"; released by ``release`` (which removes the lock file) or by the
        kernel when the process ends (the file then stays, unlocked)."""
        if self._fd is not None:
            self._depth += 1
            return
        while True:
            fd = self._open_locked()
            try:  # the file locked must still be the one at the path (a holder may have removed it)
                if os.fstat(fd).st_ino == os.stat(self.lock_file).st_ino:
                    break
            except FileNotFoundError:
                pass  # removed by the holder that released it: lock the new file instead
            except OSError as e:
                os.close(fd)
                raise CampaignError(f"{self.folder}: cannot lock the run folder: {_why(e)}") from None
            os.close(fd)
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass  # the pid is for the message only; the lock is what counts
        self._fd, self._depth = fd, 1

    def _open_locked(self) -> int:
        try:
            fd = os.open(self.lock_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
        except OSError as e:
            raise CampaignError(f"{self.folder}: cannot write the run folder: {_why(e)}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = _holder(fd)
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise CampaignError(f"{self.folder}: in use by another campaign (pid {holder})") from None
            raise CampaignError(f"{self.folder}: cannot lock the run folder: {_why(e)}") from None
        return fd

    def release(self) -> None:
        if self._fd is None:
            return
        self._depth -= 1
        if self._depth == 0:
            fd, self._fd = self._fd, None
            try:  # still holding it: whoever locks the old file next sees it gone (acquire)
                self.lock_file.unlink(missing_ok=True)
            except OSError:
                pass  # a lock file left behind is harmless: unlocked, the next acquire takes it
            os.close(fd)  # closing the only descriptor drops the flock

    def raise_if_in_use(self) -> None:
        """Raises "in use by another campaign" when another process holds the lock; creates
        nothing."""
        try:
            fd = os.open(self.lock_file, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            return  # no lock file (or none this process may open): nobody to name
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise CampaignError(f"{self.folder}: in use by another campaign (pid {_holder(fd)})") from None
        finally:
            os.close(fd)


def _holder(fd: int) -> str:
    """The pid a lock holder wrote into the lock file ("?" if none yet)."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return "?"
    return text if text.isdigit() else "?"
