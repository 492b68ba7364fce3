"""Setting up a training run: the config from a preset and overrides, the run's inputs (target, data, draft
vocabulary, a drafter to start from), validation replies, the loop and the export. ``peagle-lab train`` is
:func:`train` behind its flags.

A run is two frozen things: the :class:`~peagle_lab.train.config.TrainConfig` (what decides a step; a
resume checks it) and :class:`RunSettings` (where the run reads and writes, how long it may take, how it
is watched; none of it changes a step).
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, fields, replace
from typing import Callable

from .config import TrainConfig, field_types, parse_value


@dataclass(frozen=True)
class RunSettings:
    data: str                            # folder of shard-*.pt written by `peagle-lab regenerate`
    out: str                             # run folder: checkpoint.pt; a rerun resumes it
    export: str | None = None            # drafter folder to write (default OUT/drafter)
    overwrite: bool = False              # let the export replace a folder peagle-lab did not write
    export_dtype: str = "bfloat16"       # the exported weights' dtype
    target: str | None = None            # HF id or folder (default: the embedded SmolLM2)
    device: str = "auto"
    init_from: str | None = None         # an exported drafter to fine-tune
    max_minutes: float | None = None     # shorten the run to fit this wall time
    stop_after: int | None = None        # stop after this many steps of this launch (a rehearsed interruption)
    val_prompts: int = 0                 # validation AL on this many prompts at each checkpoint (0: none)
    val_set: str = "mt-bench"            # prompt set of the validation AL
    val_tokens: int = 128                # new tokens per validation reply

    @property
    def export_to(self) -> str:
        return self.export or f"{self.out}/drafter"


RUN_KEYS = ("export_dtype", "val_set", "val_tokens")       # the run settings `--set` reaches (the rest have flags)
_RUN_BOUNDS = {"export_dtype": ("bfloat16", "float16", "float32"), "val_tokens": 1}


def settable() -> dict[str, tuple[type, bool]]:
    """``{key: (type, may be None)}`` of every ``--set`` key: TrainConfig's fields and RUN_KEYS."""
    run = field_types(RunSettings)
    return {**field_types(TrainConfig), **{k: run[k] for k in RUN_KEYS}}


def parse_setting(text: str) -> tuple[str, object]:
    """``"KEY=VALUE"`` -> ``(key, value)``, checked; ValueError naming the fix.

    >>> parse_setting("cod_ratio=0.8"), parse_setting("share_lm_head=true")
    (('cod_ratio', 0.8), ('share_lm_head', True))
    """
    key, eq, value = text.partition("=")
    key = key.strip().replace("-", "_")
    kinds = settable()
    if not eq or not key:
        raise ValueError(f"expected KEY=VALUE like cod_ratio=0.8, got {text!r}")
    if key not in kinds:
        raise ValueError(f"unknown key {key!r}; valid keys: {', '.join(kinds)}")
    if key == "export_dtype" and value not in _RUN_BOUNDS["export_dtype"]:
        raise ValueError(f"{key}={value}: expected {' or '.join(_RUN_BOUNDS['export_dtype'])}")
    if key == "val_tokens":
        return key, _at_least_one(key, value)
    return key, parse_value(key, value, *kinds[key])


def _at_least_one(key: str, value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"{key}={value}: expected a whole number >= 1")
    return n


def training_config(preset: str | None = None, **settings) -> TrainConfig:
    """The config a run trains with: ``preset``'s recipe (else TrainConfig's defaults) with ``settings`` on top.

    >>> training_config("peagle", steps=50).steps, training_config("peagle").cod_ratio
    (50, 0.8)
    """
    return TrainConfig.preset(preset, **settings) if preset else TrainConfig(**settings)


def split_settings(settings: dict) -> tuple[dict, dict]:
    """``--set`` pairs -> (TrainConfig's, RunSettings's)."""
    run = {k: v for k, v in settings.items() if k in RUN_KEYS}
    return {k: v for k, v in settings.items() if k not in RUN_KEYS}, run


def init_drafter(path: str | None, cfg: TrainConfig, target, mark: Callable[[str], None]):
    """The exported drafter at ``path`` to fine-tune and the settings its shape fixes (else ``None, {}``).

    A P-EAGLE drafter with a frozen mask row gets a learned one (at ``cfg.mask_token_id`` or an unused id,
    starting from the row it was trained with: drafts unchanged) unless ``cfg.learn_mask_embedding`` is off.
    """
    if not path:
        return None, {}
    from ..checkpoint import load_drafter, with_learned_mask_row

    init = load_drafter(path, target)
    from ..dspark import DSparkConfig

    dspark = isinstance(init.cfg, DSparkConfig)
    kind, method = (("a DSpark", "dspark") if dspark else ("a P-EAGLE", "peagle") if init.cfg.parallel_drafting
                    else ("an EAGLE-3", "eagle"))
    if method != cfg.method:
        raise ValueError(f"--init-from {path} is {kind} drafter; "
                         f"pass --method {method} (--preset {method} for its recipe)")
    if dspark:
        mark(f"starting from {path} (DSpark, {init.cfg.num_layers} layer(s), Markov rank {init.cfg.markov_rank})")
        return init, dict(num_layers=init.cfg.num_layers, intermediate_size=init.cfg.intermediate_size,
                          draft_vocab_size=init.cfg.draft_vocab_size, markov_rank=init.cfg.markov_rank,
                          max_depth=init.cfg.block_size, mask_token_id=init.cfg.mask_token_id)
    if init.cfg.parallel_drafting and init.mask_embedding is None and cfg.learn_mask_embedding:
        old = init.cfg.mask_token_id
        init = with_learned_mask_row(init, target, cfg.mask_token_id)
        mark(f"mask token {old} -> {init.cfg.mask_token_id} with a learned row (starts as row {old}; "
             "--set learn_mask_embedding=false keeps it as it is)")
    shape = dict(num_layers=init.cfg.num_layers, intermediate_size=init.cfg.intermediate_size,
                 draft_vocab_size=init.cfg.draft_vocab_size, share_lm_head=not init.cfg.has_lm_head)
    if init.cfg.trained_depth:
        shape["max_depth"] = init.cfg.trained_depth
    mark(f"starting from {path} ({init.cfg.num_layers} layer(s), draft vocab {init.cfg.draft_vocab_size})")
    return init, shape


def _trainer(cfg: TrainConfig, run: RunSettings, device, mark):
    """Load the target and data, fit the config to a drafter to start from, build the draft vocabulary and the
    Trainer (which checks a resume: settings, data, vocabulary, target). Returns (trainer, target, coverage)."""
    import torch

    from ..target import Target
    from .data import load_samples
    from .trainer import Trainer
    from .vocab import build_draft_vocab, token_counts

    target = Target.load(run.target, device=device)
    mark(f"target loaded on {target.device}")
    samples = load_samples(run.data, vocab_size=target.vocab_size)   # ids past the vocabulary: named
    mark(f"{len(samples)} conversations loaded")
    init, shape = init_drafter(run.init_from, cfg, target, mark)
    cfg = replace(cfg, **shape)
    if cfg.share_lm_head:
        cfg = replace(cfg, draft_vocab_size=target.vocab_size)  # the target's own head scores every token
    counts = token_counts(samples, target.vocab_size)
    ids, _ = build_draft_vocab(counts, cfg.draft_vocab_size)
    if init is not None:                                 # keep the drafter's own vocabulary (its lm_head rows)
        ids = init.to_target_ids(torch.arange(init.cfg.draft_vocab_size, device=init.fc.weight.device)).cpu()
    trainer = Trainer(target, samples, cfg, run.out, ids, drafter=init, data_source=run.data)
    coverage = float(counts[trainer.draft_ids].sum()) / max(1, int(counts.sum()))   # of the vocabulary it trains
    print(f"draft vocab {cfg.draft_vocab_size}: covers {coverage:.1%} of reply tokens in {len(samples)} "
          "conversations", file=sys.stderr)
    return trainer, target, coverage


def validation_replies(target, run: RunSettings, k: int) -> list:
    """(prompt ids, greedy reply) pairs the validation AL replays: ``run.val_prompts`` spread over the set."""
    from .replay import greedy_replies
    from ..prompts import load_prompts

    prompts = [target.chat_ids(p) for p in load_prompts(run.val_set, run.val_prompts, spread=True)]
    return list(zip(prompts, greedy_replies(target, prompts, k=k, max_new_tokens=run.val_tokens)))


def train(cfg: TrainConfig, run: RunSettings) -> dict | None:
    """Train (resuming from ``run.out``) and export; the summary {drafter, steps, coverage, loss, validation AL},
    or None on a process other than rank 0 under torchrun. ``run.out`` is held for the whole run (one writer per
    folder: :class:`~peagle_lab.lock.FolderInUse` names the holder) and the export's destination is checked before
    anything loads (:class:`~peagle_lab.atomic.DestinationInUse`); a checkpoint made otherwise raises
    ResumeMismatch."""
    import contextlib
    import os

    from ..lock import hold

    writer = os.environ.get("RANK", "0") == "0"          # under torchrun rank 0 writes; the others only read
    with hold(run.out, "train") if writer else contextlib.nullcontext():
        return _train(cfg, run)


def _train(cfg: TrainConfig, run: RunSettings) -> dict | None:
    import torch

    from ..atomic import DestinationInUse, check_replaceable
    from ..checkpoint import DRAFTER_NOTE
    from ..device import resolve_device
    from .distributed import finish_distributed, init_distributed, rank_and_world

    # "auto" -> CUDA when present; under torchrun: join the group (NCCL on GPUs, one per process; gloo on CPUs, or
    # with PEAGLE_DIST_BACKEND=gloo) and train on this process's GPU; otherwise a no-op
    device = init_distributed(resolve_device(run.device))
    t0 = time.perf_counter()

    def mark(what: str) -> None:                        # start-up phases, timed (a slow one shows up in the log)
        print(f"[{time.perf_counter() - t0:6.1f} s] {what}", file=sys.stderr, flush=True)

    check_replaceable(run.export_to, run.overwrite, note=DRAFTER_NOTE)   # now, not after training
    trainer, target, coverage = _trainer(cfg, run, device, mark)
    rank0 = rank_and_world()[0] == 0
    if run.val_prompts and rank0:
        trainer.val_replies = validation_replies(target, run, trainer.cfg.val_k)
        mark(f"{len(trainer.val_replies)} validation replies generated ({run.val_set})")
    mark("trainer ready; training starts")
    history = trainer.run(time_budget_s=60 * run.max_minutes if run.max_minutes else None, progress=rank0,
                          stop_after=run.stop_after)
    if not rank0:
        finish_distributed()                            # waits for rank 0's export
        return None
    try:
        path = trainer.export(run.export_to, dtype=getattr(torch, run.export_dtype), overwrite=run.overwrite,
                              flag="--overwrite")
    except DestinationInUse as err:
        raise DestinationInUse(f"{err} (the trained checkpoint is in {run.out}: the same command with another "
                               "--export writes it without training again)") from None
    last = history[-1] if history else {}
    val_al = [r["val_al"] for r in history if "val_al" in r]
    finish_distributed()
    return {"drafter": str(path), "steps": trainer.step, "draft_vocab_coverage": coverage,
            "final_loss": last.get("loss"), "acc_per_depth": last.get("acc_per_depth"),
            "validation_al": val_al[-1] if val_al else None}


RUN_FIELDS = tuple(f.name for f in fields(RunSettings))
