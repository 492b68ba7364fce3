"""Where an engine's time goes: prefill, draft, verify and the host's bookkeeping, measured from outside.

:class:`StepTimer` wraps the calls (``with timer("draft"): ...``), so the algorithm's code holds no
clocks; on a CUDA device the draft and verify phases are timed with CUDA events (GPU time).
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass

import torch


@dataclass
class StepTimes:
    """Wall time split of one generation (seconds)."""
    prefill: float = 0.0
    draft: float = 0.0
    verify: float = 0.0
    bookkeeping: float = 0.0

    def to_dict(self) -> dict:
        return {"prefill": self.prefill, "draft": self.draft, "verify": self.verify, "bookkeeping": self.bookkeeping}

    def __add__(self, other: "StepTimes") -> "StepTimes":
        return StepTimes(**{key: getattr(self, key) + getattr(other, key) for key in self.to_dict()})


class StepTimer:
    """Time an engine's phases from outside: ``with timer("draft"): ...`` adds to ``times.draft``.

    ``events=True`` (a CUDA device): the draft and verify phases are GPU time between CUDA events, and
    ``bookkeeping`` is the rest of the steps' host time; read :attr:`times` after the last step.
    """

    def __init__(self, events: bool = False):
        self._times, self.events = StepTimes(), events
        self._marks: list[tuple[str, torch.cuda.Event, torch.cuda.Event]] = []
        self._host = 0.0                                  # with events: host seconds of every step phase

    @contextmanager
    def __call__(self, phase: str):
        events = self.events and phase != "prefill"
        if events:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        t0 = time.perf_counter()
        yield
        seconds = time.perf_counter() - t0
        if events:
            end.record()
            self._marks.append((phase, start, end))
            self._host += seconds
        else:
            setattr(self._times, phase, getattr(self._times, phase) + seconds)

    @property
    def times(self) -> StepTimes:
        if self._marks:
            torch.cuda.synchronize()
            gpu = {"draft": 0.0, "verify": 0.0}
            for phase, start, end in self._marks:
                if phase in gpu:
                    gpu[phase] += start.elapsed_time(end) / 1e3
            self._times.draft, self._times.verify = gpu["draft"], gpu["verify"]
            self._times.bookkeeping = max(0.0, self._host - gpu["draft"] - gpu["verify"])
        return self._times
