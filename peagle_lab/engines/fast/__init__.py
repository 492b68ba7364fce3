"""The fast engine: static KV caches and CUDA graphs (see :mod:`peagle_lab.engines.fast.engine`).

``config`` -- :class:`FastConfig`, the engine's options resolved once (the engine cache's key);
``llama``  -- the target's forward over a static cache;
``draft``  -- drafting over a static drafter cache (the drafter's own layers);
``graphs`` -- capture/replay of fixed-shape steps, launch and memory floors;
``engine`` -- ``generate_fast``, the same loop as :mod:`peagle_lab.engines.teaching` with one host sync a step.
"""
from .config import FastConfig
from .engine import FastEngine, generate_fast
from .graphs import StepGraph, launch_floor_us, memory_floor_ms
from .llama import StaticTarget

__all__ = ["FastConfig", "FastEngine", "StaticTarget", "StepGraph", "generate_fast", "launch_floor_us",
           "memory_floor_ms"]
