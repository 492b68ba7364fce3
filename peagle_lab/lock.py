"""One writer per output folder: ``train`` and ``regenerate`` hold a lock on the folder they write.

The lock is ``fcntl.flock`` on ``<folder>/.peagle-lab.lock``, which also records the holder (pid, command). The
kernel arbitrates between two processes that ask at once, and frees the lock when its holder ends however it
ends (SIGKILL included): a lock "left" by a killed run is simply free, and the file's stale pid is overwritten by
the next holder. A second process asking for a held folder is refused at once (:class:`FolderInUse`, naming the
holder's pid and command), never queued. Within one process the lock is re-entrant (the command line takes it
before the model loads, the library function it calls takes it again).

Taking the lock also removes what earlier, killed writes left in the folder
(:func:`~peagle_lab.atomic.clean_leftovers`): no one else is writing there now.

>>> import tempfile
>>> folder = Path(tempfile.mkdtemp())
>>> with hold(folder, "train"):
...     holder(folder)["command"]
'train'
>>> holder(folder) is None            # free again
True
"""
from __future__ import annotations

import fcntl
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from .atomic import clean_leftovers, unwritable, writable_dir

LOCK_FILE = ".peagle-lab.lock"
_HELD: dict[str, list] = {}                         # real path -> [fd, depth] of the locks this process holds


class FolderInUse(ValueError):
    """Another process writes into this folder; nothing was changed."""


def _key(folder: Path) -> str:
    return os.path.realpath(folder)


def _recorded(fd: int) -> dict:
    try:
        return json.loads(os.pread(fd, 4096, 0) or b"{}")
    except (OSError, ValueError):
        return {}


def holder(folder: str | os.PathLike) -> dict | None:
    """``{"pid": ..., "command": ...}`` of the process that holds ``folder`` now (this one included), or None."""
    folder = Path(folder)
    if _key(folder) in _HELD:
        return _recorded(_HELD[_key(folder)][0])
    try:
        fd = os.open(folder / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _recorded(fd)
    else:
        return None
    finally:
        os.close(fd)


@contextmanager
def hold(folder: str | os.PathLike, command: str, create: bool = True) -> Iterator[Path]:
    """Hold ``folder`` (made if need be) for ``command`` while the block runs; :class:`FolderInUse` when another
    process holds it. ``create=False``: a folder that does not exist yet is neither made nor held (an early check
    that leaves no trace when the command is refused later; the writer takes the lock when it makes the folder)."""
    folder = Path(folder)
    if not create and not folder.exists():
        yield folder
        return
    key = _key(writable_dir(folder))
    if key in _HELD:                                 # this process holds it already
        _HELD[key][1] += 1
        try:
            yield folder
        finally:
            _HELD[key][1] -= 1
        return
    try:
        fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise (unwritable(err, folder / LOCK_FILE) or err) from err
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        other = _recorded(fd)
        os.close(fd)
        who = (f"peagle-lab {other.get('command', '?')} (pid {other['pid']})" if other.get("pid")
               else "another peagle-lab process")
        raise FolderInUse(f"{folder} is in use by {who}: one run writes into a folder at a time. Wait for it to "
                          "finish or stop it, or choose another folder") from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps({"pid": os.getpid(), "command": command}) + "\n").encode(), 0)
        _HELD[key] = [fd, 1]
        clean_leftovers(folder)                      # every writer before us is gone
        yield folder
    finally:
        _HELD.pop(key, None)
        os.close(fd)                                 # closing the last descriptor frees the lock
