import os

import pytest
import torch

torch.set_num_threads(2)


@pytest.fixture(scope="session")
def target():
    """The real embedded target (SmolLM2-135M-Instruct, float32), loaded once: on the CPU, or on the
    device ``PEAGLE_TEST_DEVICE`` names (``cuda`` runs the engine's tests on a GPU)."""
    from peagle_lab.target import Target

    return Target.load(device=os.environ.get("PEAGLE_TEST_DEVICE", "cpu"))


@pytest.fixture(scope="session")
def mtbench_ids(target):
    from peagle_lab.prompts import load_prompts

    return [target.chat_ids(p) for p in load_prompts("mt-bench", 3)]
