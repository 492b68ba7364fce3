"""The one way ``bench`` and ``eval`` run an engine, whichever it is: ``make_engine(name, target, method, ...)``.

Each engine builds the same loop on the same request state (:class:`~peagle_lab.engines.request.Request`):
its state class (``teaching.Decode``, ``batched.Batch``, ``fast.FastEngine``) has ``prefill(...)`` and
``step(timer)``, and a ``generate`` runs ``prefill`` then ``step`` until done. What a caller sees is
one protocol, :class:`Engine`: ``generate(prompts, max_new_tokens, seed) -> Outputs``, one
:class:`~peagle_lab.engines.request.SpecResult` per prompt. A new engine is one entry in :data:`ENGINES`
(``bench`` adds its ``hf`` baseline the same way).

>>> sorted(ENGINES)
['batched', 'fast', 'teaching']
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..drafter import Eagle3Drafter
from .batched import generate_batch
from .fast.config import FastConfig
from .fast.engine import generate_fast
from .request import Outputs, SpecResult
from .teaching import generate
from .timing import StepTimes


class Engine(Protocol):
    """What every engine offers a caller that should not know which one runs."""
    name: str

    def generate(self, prompts: list[list[int]], max_new_tokens: int, seed: int | None = None) -> Outputs:
        """Every prompt (token ids) to its reply; ``seed`` seeds sampling (each prompt alike)."""


@dataclass
class Settings:
    """One configuration of the speculative loop: what runs on which target."""
    target: object
    method: str = "peagle"
    drafter: Eagle3Drafter | None = None
    k: int = 5
    temperature: float = 0.0
    top_p: float = 1.0
    stop_at_eos: bool = True


def one_at_a_time(results: list[SpecResult]) -> Outputs:
    """Single-request engines over several prompts: their results, the summed wall time and time split."""
    return Outputs(results, sum(r.seconds for r in results), sum((r.times for r in results), StepTimes()))


@dataclass
class Teaching(Settings):
    """:func:`peagle_lab.engines.teaching.generate`, one prompt after another."""
    name = "teaching"

    def generate(self, prompts: list[list[int]], max_new_tokens: int, seed: int | None = None) -> Outputs:
        return one_at_a_time([generate(self.target, ids, method=self.method, drafter=self.drafter, k=self.k,
                                       max_new_tokens=max_new_tokens, temperature=self.temperature, top_p=self.top_p,
                                       seed=seed, stop_at_eos=self.stop_at_eos) for ids in prompts])


@dataclass
class Batched(Settings):
    """:func:`peagle_lab.engines.batched.generate_batch`: all prompts as one batch (greedy)."""
    name = "batched"

    def generate(self, prompts: list[list[int]], max_new_tokens: int, seed: int | None = None) -> Outputs:
        return generate_batch(self.target, prompts, method=self.method, drafter=self.drafter, k=self.k,
                              max_new_tokens=max_new_tokens, temperature=self.temperature,
                              stop_at_eos=self.stop_at_eos)


@dataclass
class Fast(Settings):
    """:func:`peagle_lab.engines.fast.generate_fast` (static caches, CUDA graphs), one prompt after another."""
    config: FastConfig | None = None
    name = "fast"

    def generate(self, prompts: list[list[int]], max_new_tokens: int, seed: int | None = None) -> Outputs:
        return one_at_a_time([generate_fast(self.target, ids, method=self.method, drafter=self.drafter, k=self.k,
                                            max_new_tokens=max_new_tokens, temperature=self.temperature,
                                            top_p=self.top_p, seed=seed, stop_at_eos=self.stop_at_eos,
                                            config=self.config) for ids in prompts])


ENGINES: dict[str, type] = {"teaching": Teaching, "batched": Batched, "fast": Fast}


def make_engine(name: str, target, method: str = "peagle", drafter: Eagle3Drafter | None = None, k: int = 5,
                **options) -> Engine:
    """The engine ``name`` (a key of :data:`ENGINES`) for this target, method, drafter and K; ``options``:
    ``temperature``, ``top_p``, ``stop_at_eos`` and, for ``fast``, ``config``."""
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r}; choose from {', '.join(ENGINES)}")
    return ENGINES[name](target, method, drafter, k, **options)
