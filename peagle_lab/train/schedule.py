"""The learning rate over a run: a linear warm-up, then a cosine from 1 down to 0.1 at the run's last step.

The last step may move while the run goes: a run with a time budget (or a data pool that stops growing)
refits it with :func:`steps_that_fit`, the one home of that rule, and the cosine follows
(:class:`Schedule`); a run continued from an earlier one warms up again from where it starts.
"""
from __future__ import annotations

import math

def lr_factor(step: int, warmup_steps: int, total_steps: int) -> float:
    """Linear warm-up, then a cosine from 1 down to 0.1 at ``total_steps``.

    >>> [round(lr_factor(s, 2, 10), 3) for s in (0, 1, 2, 10)]
    [0.5, 1.0, 1.0, 0.1]
    """
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def steps_that_fit(step: int, seconds_per_step: float | None, seconds_left: float, *caps: int | None) -> int:
    """Where the cosine should end: as many more steps as ``seconds_left`` holds at ``seconds_per_step`` (None: not
    measured yet, no limit from time), at most each cap given (the steps asked for, the pool left), at least one
    more than ``step``.

    >>> steps_that_fit(100, 0.5, 60.0, 1000), steps_that_fit(100, 0.5, 60.0, 150), steps_that_fit(100, 1.0, 0.0)
    (220, 150, 101)
    """
    ends = [c for c in caps if c is not None]
    if seconds_per_step:
        ends.append(step + int(seconds_left / seconds_per_step))
    return max(step + 1, min(ends)) if ends else step + 1


class Schedule:
    """The LR factor of each step (a ``LambdaLR``'s function): :func:`lr_factor` towards ``total``, which a run
    may refit; after :meth:`restart_at` a fresh warm-up from that step multiplies it."""

    def __init__(self, warmup_steps: int, total: int):
        self.warmup_steps, self.total, self.restart = warmup_steps, total, None

    def __call__(self, step: int) -> float:
        factor = lr_factor(step, self.warmup_steps, self.total)
        if self.restart is not None:
            factor *= min(1.0, (step - self.restart + 1) / self.warmup_steps)
        return factor

    def restart_at(self, step: int) -> None:
        self.restart = step
