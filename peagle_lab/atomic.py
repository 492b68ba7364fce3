"""Atomic writes: a reader (another process, a resumed run) sees the old version or the new one, never
half of one, and a write that fails or is killed leaves the old version in place.

Both helpers write beside the destination (same filesystem, so the final rename is atomic) and
remove what they wrote if the ``with`` block raises. A kill (SIGKILL, a power cut) at any instant leaves
the old version or the new one at the destination, never neither: a folder is swapped in with one
atomic exchange (Linux), and where that is missing a kill between its two renames is undone on the
next write. What a killed writer left beside the destination (``<name>.tmp-<pid>-*``,
``<name>.replaced-<pid>-*``) is cleaned by the next write of that name (:func:`clean_leftovers`).
A full, read-only or forbidden destination raises :class:`Unwritable`, one line naming the place and
the fix, with the old version whole.

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

import errno
import json
import os
import re
import shutil
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

MARKER = ".peagle-lab-export.json"


class DestinationInUse(FileExistsError):
    """An export's destination holds files peagle-lab did not write; nothing was changed."""

DRAFTER_NOTE = "drafter checkpoint"     # the marker note of every drafter folder (check_replaceable)


def publishable(folder: Path) -> None:
    """The temporary folder is private (0700) while written; a finished one is readable like any other."""
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


# ----------------------------------------------------------------------------- leftovers of a killed write
# What a write puts beside its destination carries the writer's pid: <name>.tmp-<pid>-<hex> (being written) and
# <name>.replaced-<pid>-<hex> (the old version, on its way out). One whose writer is dead is a leftover of a kill.
_LEFTOVER = re.compile(r"^(?P<name>.+)\.(?P<kind>tmp|replaced)-(?P<pid>\d+)-[0-9a-f]{8}$")


def _beside(path: Path, kind: str) -> Path:
    return path.with_name(f"{path.name}.{kind}-{os.getpid()}-{uuid.uuid4().hex[:8]}")


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:                             # another user's process: alive
        return True
    return True


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def clean_leftovers(folder: str | os.PathLike, name: str | None = None) -> list[str]:
    """Remove what killed writes left in ``folder`` (only for destination ``name``, when given); returns the names.

    A ``.replaced-*`` whose destination is missing is the old version a kill caught between two renames (a file
    system without an atomic exchange): it is put back, so the destination is whole again. Anything else of a dead
    writer (a half-written ``.tmp-*``, an old version not yet deleted) is removed. A live writer's files, and names
    that merely look alike (``drafter.tmp-mine``), are left alone."""
    folder, done = Path(folder), []
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return done
    for entry in entries:
        m = _LEFTOVER.match(entry.name)
        if not m or (name is not None and m["name"] != name) or _alive(int(m["pid"])):
            continue
        dest = entry.with_name(m["name"])
        if m["kind"] == "replaced" and not (dest.exists() or dest.is_symlink()):
            os.rename(entry, dest)                      # the old version, whole: back in place
        else:
            _remove(entry)
        done.append(entry.name)
    return done


# ----------------------------------------------------------------------------- full or unwritable destinations
class Unwritable(OSError, ValueError):
    """A destination that cannot take the write (no space, no permission, read-only); what was there is unchanged.
    A ValueError too, so the command line prints its one line."""

    def __str__(self) -> str:
        return self.strerror or super().__str__()     # the sentence alone, without "[Errno 28]"


_NO_SPACE = ("no space left", "os error 28", "storagefull", "disk quota exceeded", "file write failed")


def unwritable(err: BaseException, path: str | os.PathLike) -> Unwritable | None:
    """``err`` (raised while writing ``path``) as an :class:`Unwritable` naming the place and the fix, or None when
    it is no such fault. torch and safetensors report a full disk in their own words; those count too."""
    if isinstance(err, Unwritable):
        return err
    path = Path(path)
    place = next((p for p in [path, *path.parents] if p.exists()), path)
    code = getattr(err, "errno", None)
    if code in (errno.ENOSPC, errno.EDQUOT) or (not isinstance(err, OSError) and
                                                any(s in str(err).lower() for s in _NO_SPACE)):
        try:
            free = shutil.disk_usage(place).free / 2**20
            left = f" ({free:.0f} MiB free)"
        except OSError:
            left = ""
        return Unwritable(errno.ENOSPC, f"no space left on {place}{left} while writing {path.name}: free space "
                                        "there or write elsewhere (another --out, --export or --json; PEAGLE_CACHE for "
                                        "the cache); nothing already there was changed")
    if code in (errno.EACCES, errno.EPERM):
        return Unwritable(code, f"{place}: permission denied while writing {path.name}: choose a folder this user "
                                "can write in (or PEAGLE_CACHE for the cache), or fix its permissions")
    if code == errno.EROFS:
        return Unwritable(code, f"{place} is on a read-only file system: write {path.name} elsewhere")
    return None


def writable_dir(folder: str | os.PathLike) -> Path:
    """``folder``, made (with its parents) if need be; a full or unwritable place raises :class:`Unwritable`."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise (unwritable(err, folder) or err) from err
    return folder


# ----------------------------------------------------------------------------- the two writes
@contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path`` (``os.replace``). Leftovers of an
    earlier killed write of ``path`` are removed first; a full or unwritable disk raises :class:`Unwritable`."""
    path = Path(path)
    clean_leftovers(path.parent, path.name)
    tmp = _beside(path, "tmp")
    try:
        os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        yield tmp
        os.replace(tmp, path)
    except BaseException as err:
        problem = unwritable(err, path) if isinstance(err, Exception) else None
        tmp.unlink(missing_ok=True)
        if problem is not None and problem is not err:
            raise problem from err
        raise


_RENAME_EXCHANGE = 2                                    # linux/fs.h


def _exchange(a: Path, b: Path) -> bool:
    """Swap ``a`` and ``b`` in one step (Linux ``renameat2(RENAME_EXCHANGE)``); False where the system cannot."""
    import ctypes

    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    at_cwd = -100
    if renameat2(at_cwd, os.fsencode(a), at_cwd, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(b))


def _swap_in(tmp: Path, path: Path) -> None:
    """Put ``tmp`` at ``path``, so that at every instant ``path`` holds the old version or the new one. An existing
    ``path`` is exchanged with ``tmp`` in one step and the old version (now under the temporary name) deleted.
    Where the file system cannot exchange, the old version is first renamed aside (``.replaced-<pid>-*``; a kill
    between the two renames is undone by :func:`clean_leftovers`, which puts it back) and deleted once the new one
    is in place; a sibling of any other name, ``<path>.old`` included, is never touched."""
    if not (path.exists() or path.is_symlink()):
        os.rename(tmp, path)                    # atomic on one filesystem: readers see all of it or nothing
        return
    if _exchange(tmp, path):
        _remove(tmp)                            # the old version; a kill now leaves a dead writer's .tmp-*
        return
    aside = _beside(path, "replaced")
    os.rename(path, aside)
    try:
        os.rename(tmp, path)
    except BaseException:
        os.rename(aside, path)
        raise
    _remove(aside)


@contextmanager
def atomic_dir(path: str | os.PathLike, *, overwrite: bool = False, flag: str | None = "--overwrite",
               note: str | None = None) -> Iterator[Path]:
    """Yield an empty temporary folder beside ``path``; on success the marker (:data:`MARKER`, with ``note``)
    is added, the folder made readable (:func:`publishable`) and swapped in (:func:`_swap_in`).

    A folder already at ``path`` is replaced only when it is empty or peagle-lab wrote it, or with
    ``overwrite=True``; otherwise :class:`DestinationInUse` is raised (before anything is written, and
    again just before the swap) and nothing changes. Leftovers of an earlier killed write of ``path`` are
    cleaned first (:func:`clean_leftovers`); a full or unwritable disk raises :class:`Unwritable`."""
    path = Path(path)
    clean_leftovers(path.parent, path.name)
    check_replaceable(path, overwrite, flag, note)
    tmp = _beside(path, "tmp")
    try:
        os.mkdir(tmp, 0o700)
        yield tmp
        (tmp / MARKER).write_text(_marker_text(note))
        publishable(tmp)
        check_replaceable(path, overwrite, flag, note)   # someone may have filled it while we wrote
        _swap_in(tmp, path)
    except BaseException as err:
        problem = unwritable(err, path) if isinstance(err, Exception) else None
        shutil.rmtree(tmp, ignore_errors=True)
        if problem is not None and problem is not err:
            raise problem from err
        raise
