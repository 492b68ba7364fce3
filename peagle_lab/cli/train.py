"""``peagle-lab train``: train an EAGLE-3 or P-EAGLE drafter from regenerated data; resumes from --out."""
from __future__ import annotations

import argparse
import json

from .common import (above_zero, check_drafter_folders, check_not_read, count, device_name, int_range, positive,
                     shipped_name)

NAME = "train"

# The train flags that set a TrainConfig field, by field (the rest of the config is reached by --set KEY=VALUE).
_TRAIN_FLAGS = {"method": "--method", "steps": "--steps", "batch_size": "--batch-size", "lr": "--lr",
                "num_layers": "--num-layers", "draft_vocab_size": "--draft-vocab-size", "max_len": "--max-len",
                "num_segments": "--segments"}


def _setting(text: str) -> tuple[str, object]:
    """An argparse ``type`` for ``--set KEY=VALUE``: a TrainConfig field (or a run setting) and a value it accepts."""
    from ..train.setup import parse_setting

    try:
        return parse_setting(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def add_parser(sub) -> argparse.ArgumentParser:
    from ..train.config import PRESETS, TrainConfig

    D = TrainConfig()                                   # one set of defaults: the config's
    s = sub.add_parser("train", help="train an EAGLE-3 (eagle) or P-EAGLE (peagle) drafter; resumes from --out")
    s.add_argument("--preset", default=None, choices=list(PRESETS),
                   help="README's GPU recipe: peagle (4 layers, COD 0.8, feature noise 0.05) or eagle (1 layer), both "
                        "batch 32, draft vocab 8192, 20000 steps, grouped by length; flags and --set override it")
    s.add_argument("--method", default=None, choices=["peagle", "eagle", "dspark"],
                   help=f"default: the preset's, else {D.method}")
    s.add_argument("--data", required=True, help="folder written by `peagle-lab regenerate`")
    s.add_argument("--out", required=True, help="run folder (checkpoint.pt lives here; a rerun resumes it)")
    s.add_argument("--export", default=None, help="drafter folder to write (default OUT/drafter): new, empty or an "
                                                   "earlier export")
    s.add_argument("--overwrite", action="store_true",
                   help="let --export replace a folder peagle-lab did not write (its files are deleted)")
    s.add_argument("--target", default=None, help="HF model id or folder (default: embedded SmolLM2-135M-Instruct)")
    s.add_argument("--device", type=device_name, default="auto", help="auto (CUDA when present), cpu or cuda")
    s.add_argument("--steps", type=positive, default=None,
                   help=f"optimiser steps (default: the preset's, else {D.steps})")
    s.add_argument("--batch-size", type=positive, default=None,
                   help=f"conversations per optimiser step (default: the preset's, else {D.batch_size})")
    s.add_argument("--lr", type=above_zero, default=None, help=f"peak learning rate (default {D.lr})")
    s.add_argument("--num-layers", type=positive, default=None,
                   help=f"drafter layers (default: the preset's, else {D.num_layers})")
    s.add_argument("--draft-vocab-size", type=positive, default=None,
                   help=f"tokens the drafter drafts (default: the preset's, else {D.draft_vocab_size})")
    s.add_argument("--max-len", type=int_range(2), default=None,
                   help=f"tokens per conversation, longer are cut (default {D.max_len})")
    s.add_argument("--segments", type=positive, default=None, dest="num_segments",
                   help="sequence partitioning: segments per packed sequence (long sequences; default 1)")
    s.add_argument("--init-from", default=None,
                   help="start from an exported drafter folder (fine-tuning): its layers, width, vocabulary and depth "
                        "replace the config's")
    s.add_argument("--val-prompts", type=count, default=0,
                   help="at each checkpoint, replay greedy decoding on this many prompts and log the validation AL "
                        "(equal to the engine's; one drafter pass per reply)")
    s.add_argument("--max-minutes", type=above_zero, default=None, help="shorten the run to fit this wall time")
    s.add_argument("--stop-after", type=positive, default=None,
                   help="stop after this many steps of this launch (a rehearsed interruption: the same command "
                        "resumes from the last checkpoint towards --steps)")
    s.add_argument("--set", type=_setting, action="append", default=[], metavar="KEY=VALUE",
                   help="any other training setting, repeatable: a TrainConfig field (cod_ratio=0.8, max_depth=8, "
                        "hidden_noise=0.05, share_lm_head=true, mask_token_id=16, learn_mask_embedding=false, "
                        "layout=packed, warmup_steps=100, checkpoint_every=300, seed=1, val_k=7, ...) or "
                        "export_dtype, val_set, val_tokens; docs/training.md lists them")
    return s


def _train_settings(args):
    """(TrainConfig, RunSettings) the train flags ask for: the preset (else the defaults), the flags given over it,
    then --set."""
    from ..train.setup import RUN_FIELDS, RunSettings, split_settings, training_config

    config_sets, run_sets = split_settings(dict(args.set or []))
    given = {name: getattr(args, name) for name in _TRAIN_FLAGS if getattr(args, name) is not None}
    cfg = training_config(args.preset, **given, **config_sets)
    run = RunSettings(**{k: getattr(args, k) for k in RUN_FIELDS if hasattr(args, k)}, **run_sets)
    return cfg, run


def validate(p: argparse.ArgumentParser, args) -> None:
    """--set never repeats a flag; the resolved config is one a run can train; the folders it reads are there and
    the export replaces none of them (exit 2 before any model loads)."""
    from pathlib import Path

    args.init_from = shipped_name(args.init_from)
    for key, _ in args.set:
        if key in _TRAIN_FLAGS:
            p.error(f"--set {key}: use {_TRAIN_FLAGS[key]} (each setting has one way in)")
    cfg, _ = _train_settings(args)
    if cfg.method == "peagle" and args.val_prompts and not args.init_from and cfg.val_k > cfg.max_depth:
        p.error(f"val_k {cfg.val_k} exceeds max_depth {cfg.max_depth}: a P-EAGLE drafter drafts at most the depths "
                "it was trained on (--set val_k=K with K <= max_depth, or a larger --set max_depth)")
    if cfg.share_lm_head and args.draft_vocab_size is not None:
        p.error(f"--draft-vocab-size {args.draft_vocab_size} with --set share_lm_head=true: the target's output layer "
                "drafts its whole vocabulary; drop one of the two")
    check_drafter_folders(p, [("--init-from", args.init_from)])
    if not any(Path(args.data).expanduser().glob("shard-*.pt")):
        p.error(f"--data {args.data}: no shard-*.pt files there (write them with `peagle-lab regenerate --out "
                f"{args.data}`)")
    check_not_read(p, args, [("the run folder (with its checkpoint.pt) --out", args.out),
                             ("--init-from", args.init_from), ("--data", args.data)], "--export", args.export)


def run(args) -> int:
    from ..atomic import DestinationInUse
    from ..train.setup import train
    from ..train.trainer import ResumeMismatch

    try:
        summary = train(*_train_settings(args))
    except (DestinationInUse, ResumeMismatch) as err:   # a user's folder, or a run folder made otherwise
        raise SystemExit(f"peagle-lab train: {err}") from None
    if summary is not None:                             # rank 0 (or the only process)
        print(json.dumps(summary))
    return 0
