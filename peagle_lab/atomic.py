"""Atomic writes: a reader (another process, a resumed run) sees the old version or the new one, never
half of one, and a write that fails or is killed leaves the old version in place.

Both helpers write beside the destination (same filesystem, so the final rename is atomic) and
remove what they wrote if the ``with`` block raises.

:func:`atomic_dir` also never deletes what it did not write. Every folder it publishes carries a
small marker file (:data:`MARKER`, naming what wrote it and when); a destination that exists is
replaced only when it is empty or carries that marker. Anything else -- a folder of the user's own
files, an unrelated file -- is refused (:class:`DestinationInUse`, naming the path and the flag that
allows it) unless the caller passes ``overwrite=True``.

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
>>> sorted(p.name for p in (root / "model").iterdir())
['.peagle-lab-export.json', 'config.json']
>>> shutil.rmtree(root)
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

MARKER = ".peagle-lab-export.json"


class DestinationInUse(FileExistsError):
    """An export's destination holds files peagle-lab did not write; nothing was changed."""


def publishable(folder: Path) -> None:
    """mkdtemp makes private (0700) folders; a finished folder is readable like any other file."""
    os.chmod(folder, 0o755)
    for f in folder.iterdir():
        os.chmod(f, 0o644)


def written_by_us(path: str | os.PathLike) -> bool:
    """True when ``path`` is a folder :func:`atomic_dir` published (it holds :data:`MARKER`)."""
    return (Path(path) / MARKER).is_file()


def _kind(note: str | None) -> str:
    """What kind of folder a marker's note describes: "drafter checkpoint", "materialised", "export"."""
    return (note or "export").split(" from ")[0]


def written_as(path: str | os.PathLike) -> str | None:
    """The kind of folder :func:`atomic_dir` wrote at ``path`` (:func:`_kind` of its marker's note), or None."""
    try:
        return _kind(json.loads((Path(path) / MARKER).read_text()).get("what"))
    except (OSError, ValueError, AttributeError):
        return None


def check_replaceable(path: str | os.PathLike, overwrite: bool = False, flag: str | None = "--overwrite",
                      note: str | None = None) -> None:
    """Refuse (:class:`DestinationInUse`) a destination whose contents would be lost: one that exists and is
    neither an empty folder nor a folder peagle-lab wrote of the same kind as ``note`` (a drafter export replaces
    a drafter, never a converted target). ``overwrite=True`` allows it; ``flag`` is how the caller's user says so
    (named in the message; None: there is no such flag, the user moves it away)."""
    path = Path(path)
    if overwrite or not (path.exists() or path.is_symlink()):
        return
    ours = path.is_dir() and not path.is_symlink() and written_by_us(path)
    if path.is_dir() and not path.is_symlink() and (not any(path.iterdir()) or
                                                    (ours and (note is None or written_as(path) == _kind(note)))):
        return
    what = ("a file" if not path.is_dir() else
            f"a {written_as(path) or 'folder'} peagle-lab wrote, not a {_kind(note)}" if ours else
            "a folder peagle-lab did not write (no " + MARKER + ")")
    fix = f"pass {flag} to replace it" if flag else "move it away first"
    raise DestinationInUse(f"{path} exists and is {what}; writing there would delete it. Choose a new or empty "
                           f"folder, or {fix}")


def _marker_text(note: str | None) -> str:
    from . import __version__

    record = {"written_by": f"peagle-lab {__version__}", "what": note or "export",
              "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    return json.dumps(record, indent=2) + "\n"


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


def _swap_in(tmp: Path, path: Path) -> None:
    """Put ``tmp`` at ``path``. An existing ``path`` is first renamed to a name no one else uses (so a
    sibling of any name, ``<path>.old`` included, is never touched), then removed once ``tmp`` is in place;
    if that second rename fails the old folder goes back."""
    if not (path.exists() or path.is_symlink()):
        os.rename(tmp, path)                    # atomic on one filesystem: readers see all of it or nothing
        return
    aside = path.with_name(f"{path.name}.replaced-{uuid.uuid4().hex[:12]}")
    os.rename(path, aside)
    try:
        os.rename(tmp, path)
    except BaseException:
        os.rename(aside, path)
        raise
    if aside.is_dir() and not aside.is_symlink():
        shutil.rmtree(aside, ignore_errors=True)
    else:
        aside.unlink(missing_ok=True)


@contextmanager
def atomic_dir(path: str | os.PathLike, *, overwrite: bool = False, flag: str | None = "--overwrite",
               note: str | None = None) -> Iterator[Path]:
    """Yield an empty temporary folder beside ``path``; on success the marker (:data:`MARKER`, with ``note``)
    is added, the folder made readable (:func:`publishable`) and renamed to ``path``.

    A folder already at ``path`` is replaced only when it is empty or peagle-lab wrote it, or with
    ``overwrite=True``; otherwise :class:`DestinationInUse` is raised (before anything is written, and
    again just before the swap) and nothing changes."""
    path = Path(path)
    check_replaceable(path, overwrite, flag, note)
    tmp = Path(tempfile.mkdtemp(prefix=path.name + ".tmp-", dir=path.parent))
    try:
        yield tmp
        (tmp / MARKER).write_text(_marker_text(note))
        publishable(tmp)
        check_replaceable(path, overwrite, flag, note)   # someone may have filled it while we wrote
        _swap_in(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
