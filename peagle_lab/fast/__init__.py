"""The fast engine: static KV caches and CUDA graphs (see :mod:`peagle_lab.fast.engine`).

``llama``  -- the target's forward over a static cache;
``draft``  -- drafting over a static drafter cache (the drafter's own layers);
``graphs`` -- capture/replay of fixed-shape steps, launch and memory floors;
``engine`` -- ``generate_fast``, the same loop as :mod:`peagle_lab.engine` with one host sync a step.
"""
from .engine import FastEngine, generate_fast
from .graphs import StepGraph, launch_floor_us, memory_floor_ms
from .llama import StaticTarget

__all__ = ["FastEngine", "StaticTarget", "StepGraph", "generate_fast", "launch_floor_us", "memory_floor_ms"]
