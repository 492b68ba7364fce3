"""Atomic writes: a reader (another process, a resumed run) sees the old version or the new one, never
half of one, and a write that fails or is killed leaves the old version in place.

Both helpers write beside the destination (same filesystem, so the final rename is atomic) and
remove what they wrote if the ``with`` block raises.

>>> import tempfile
>>> root = Path(tempfile.mkdtemp())
>>> with atomic_file(root / "a.txt") as tmp:
...     _ = tmp.write_text("all of it")
>>> (root / "a.txt").read_text()
'all of it'
>>> with atomic_dir(root / "model") as tmp:
...     _ = (tmp / "config.json").write_text("{}")
>>> sorted(p.name for p in root.iterdir())
['a.txt', 'model']
>>> shutil.rmtree(root)
"""
from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def publishable(folder: Path) -> None:
    """mkdtemp makes private (0700) folders; a finished folder is readable like any other file."""
    os.chmod(folder, 0o755)
    for f in folder.iterdir():
        os.chmod(f, 0o644)


@contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path`` (``os.replace``)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".tmp-", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty temporary folder beside ``path``; on success it is made readable
    (:func:`publishable`) and renamed to ``path``, replacing a folder already there."""
    path = Path(path)
    tmp = Path(tempfile.mkdtemp(prefix=path.name + ".tmp-", dir=path.parent))
    try:
        yield tmp
        publishable(tmp)
        if path.exists():
            old = path.with_name(path.name + ".old")
            shutil.rmtree(old, ignore_errors=True)
            os.rename(path, old)
            os.rename(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, path)  # atomic on one filesystem: readers see all of it or nothing
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
