"""What we ship keeps accepting what it accepted: each shipped drafter's acceptance, replayed on a fixed prompt slice
at a fixed K, equals a pinned value (vLLM pins its drafters the same way in
`tests/v1/spec_decode/test_acceptance_length.py`, AL within 5%).

A retrained or re-exported drafter, a change to drafting, verification, the replay or the target's numerics moves
these numbers; "accepted at least one token" would not notice. The replay equals the teaching engine step for step
(tests/test_replay.py), so this pins the engine's acceptance at a fraction of its time.

Pinned on a 2-core x86-64 CPU, float32, from `evaluate_drafters` on the slice below (one prompt from each of six
MT-Bench categories, the target's greedy replies, K=7, 48 new tokens). To re-pin after a deliberate change, run
this file with ``-s`` and copy the printed values, and say in the commit why they moved.
"""
import pytest

from peagle_lab.checkpoint import load_drafter
from peagle_lab.drafters_registry import shipped
from peagle_lab.prompts import load_categories, load_prompts
from peagle_lab.train.replay import evaluate_drafters, greedy_replies

PICK = [0, 20, 30, 40, 50, 70]          # writing, reasoning, math, coding, extraction, humanities
K, NEW = 7, 48
PINS = {     # name -> (AL, acceptance per position); measured 2026-12 on this slice (147, 163 and 191 drafting steps)
    "dspark-smollm2": (1.4921, [0.3927, 0.0785, 0.0157, 0.0052, 0.0, 0.0, 0.0]),
    "eagle-smollm2": (1.9388, [0.4694, 0.2721, 0.1224, 0.0408, 0.0204, 0.0068, 0.0068]),
    "peagle-smollm2": (1.7546, [0.4724, 0.1963, 0.0491, 0.0123, 0.0123, 0.0123, 0.0]),
}


@pytest.fixture(scope="module")
def replayed(target):
    every, cats = load_prompts("mt-bench"), load_categories("mt-bench")
    assert [cats[i] for i in PICK] == ["writing", "reasoning", "math", "coding", "extraction", "humanities"]
    prompts = [target.chat_ids(every[i]) for i in PICK]
    replies = greedy_replies(target, prompts, k=K, max_new_tokens=NEW)
    drafters = {name: load_drafter(path, target) for name, path in shipped().items() if name in PINS}
    assert set(drafters) == set(PINS), f"shipped drafters missing: {set(PINS) - set(drafters)}"
    return evaluate_drafters(target, drafters, prompts, replies, k=K, max_new_tokens=NEW)


@pytest.mark.parametrize("name", sorted(PINS))
def test_shipped_drafter_acceptance_length_is_pinned(replayed, name):
    al, per_position = PINS[name]
    got = replayed[name]
    print(f"\n{name}: AL {got['acceptance_length']}, per position {got['acceptance_per_position']}")
    assert got["acceptance_length"] == pytest.approx(al, rel=0.05), \
        f"{name}: AL {got['acceptance_length']} moved from the pinned {al} by more than 5%"
    # per position, loosely: the first positions carry most of AL; later ones are a handful of tokens each
    assert got["acceptance_per_position"] == pytest.approx(per_position, rel=0.15, abs=0.02), \
        f"{name}: acceptance per position {got['acceptance_per_position']} moved from the pinned {per_position}"
