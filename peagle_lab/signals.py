"""SIGTERM and SIGHUP end a command the way Ctrl-C does.

Python turns Ctrl-C (SIGINT) into KeyboardInterrupt, so ``finally`` blocks and ``with`` exits run: a half-written
temporary file is removed, a folder's lock is freed, a server's process group is stopped. SIGTERM (``kill``, a job
scheduler, a container stopping) and SIGHUP (a closed terminal) would end the process on the spot instead, leaving
all of that behind. Inside :func:`as_interrupt` they raise :class:`Terminated`, a KeyboardInterrupt, so every
command ends the same way within a few seconds, with one line and exit status 128 + the signal's number.

>>> import os, signal
>>> try:
...     with as_interrupt():
...         os.kill(os.getpid(), signal.SIGTERM)
... except Terminated as stop:
...     stop.signum == signal.SIGTERM
True
"""
from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Iterator

SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n))


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the main thread was, as Ctrl-C raises KeyboardInterrupt."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise(signum, frame) -> None:
    raise Terminated(signum)


@contextmanager
def as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise :class:`Terminated` (main thread only; an ignored signal, as under
    ``nohup``, stays ignored); the previous handlers come back after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in SIGNALS}
    for sig, handler in previous.items():
        if handler is not signal.SIG_IGN:
            signal.signal(sig, _raise)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
