"""What a training run is made from, and whether a checkpoint on disk is this run's to resume.

A checkpoint records the training settings, the draft vocabulary, a fingerprint of the data and the
target's identity; :func:`resume_problems` names every difference from this run's (empty: resume).
Settings that change how a step is computed or saved, never which step or its gradient, may differ
(:data:`RESUME_MAY_CHANGE`).
"""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import torch

from .config import TrainConfig
from .identity import target_difference

CHECKPOINT_FIX = ("move it away to start afresh (training then begins again at step 0), or put back a whole copy: "
                   "every save replaces it atomically, so only a copy made otherwise can be damaged")

# The layouts and partitioning are proven equal in tests/test_partition.py; ``steps``: a run cut short by a time
# budget resumes towards the new total.
RESUME_MAY_CHANGE = ("steps", "checkpoint_every", "num_segments", "layout", "val_k", "micro_batches")

def checkpoint_size(path: Path) -> str:
    return f"{path.stat().st_size / 2**20:.1f} MiB" if path.exists() else "gone"


class ResumeMismatch(ValueError):
    """A checkpoint in the run folder was made from other settings, data, draft vocabulary or target."""


def vocab_problem(theirs: torch.Tensor | None, ours: torch.Tensor) -> str | None:
    if theirs is None or torch.equal(theirs.cpu().sort().values, ours.cpu()):
        return None
    shared = len(set(theirs.tolist()) & set(ours.tolist()))
    return (f"its draft vocabulary is not this run's ({shared} of {theirs.numel()} ids shared; the draft vocabulary "
            "is built from --data, or kept from --init-from)")


def provenance_problems(recorded: dict, ours: dict) -> list[str]:
    """What differs between the data and target a checkpoint recorded and this run's (empty: nothing)."""
    out = []
    if recorded.get("data_fingerprint") != ours["data_fingerprint"]:
        src, now = recorded.get("data_source") or "(folder not recorded)", ours["data_source"] or "(samples given)"
        out.append(f"it was trained on data {src} (fingerprint {str(recorded.get('data_fingerprint'))[:12]}), "
                   f"this run's data {now} has fingerprint {ours['data_fingerprint'][:12]}")
    target = target_difference(recorded.get("target") or {}, ours["target"])
    if target:
        out.append(f"it was trained against another target: {target}")
    return out


def config_diff(cfg: TrainConfig, recorded: dict) -> list[str]:
    """The settings of ``cfg`` that differ from a checkpoint's ``recorded`` config, sorted (those in
    :data:`RESUME_MAY_CHANGE` may). A setting newer than the checkpoint counts as its default there; one since
    removed (attention, head_init, objective) is not compared."""
    free = dict.fromkeys(RESUME_MAY_CHANGE)
    ours = {**asdict(cfg), **free}
    theirs = {k: v for k, v in {**asdict(TrainConfig()), **recorded, **free}.items() if k in ours}
    return sorted(k for k in ours if theirs.get(k) != ours[k])


def resume_problems(state: dict, cfg: TrainConfig, provenance: dict, draft_ids: torch.Tensor) -> list[str]:
    """Why a checkpoint ``state`` cannot be resumed by a run of ``cfg`` made from ``provenance`` with
    ``draft_ids`` (empty: it can). A checkpoint that records neither data nor target (an older one, without
    ``"provenance"``) has only its settings and draft vocabulary compared."""
    problems = []
    diff = config_diff(cfg, state["config"])
    if diff:
        was = {**asdict(TrainConfig()), **state["config"]}
        said = ", ".join(f"{k} {was.get(k)!r} there, {getattr(cfg, k)!r} now" for k in diff)
        problems.append(f"it was written with another training config (differs in {said})")
    if "provenance" in state:
        problems += provenance_problems(state["provenance"], provenance)
    vocab = vocab_problem(state.get("draft_ids"), draft_ids)
    if vocab:
        problems.append(vocab)
    return problems
