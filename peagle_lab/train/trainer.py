"""The training loop: online target features, COD elements, optimiser, checkpoint/resume, export.

One optimiser step = ``batch_size`` conversations. The target runs on them (no gradient) to give
features and logits over the draft vocabulary; the conversations are packed into one sequence
(document ids keep them apart), COD-sampled into elements, and the drafter's loss is summed over
them (optionally in ``num_segments`` partitions) and divided by the count of supervised
elements. Everything that decides a step -- which conversations, which COD elements -- is a
function of ``(seed, step)``, so a run resumed from its checkpoint repeats no step and loses none.
"""
from __future__ import annotations

import json
import os
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import torch
import torch.distributed as dist
from tqdm.auto import tqdm

from ..atomic import atomic_file
from ..checkpoint import save_drafter, vllm_config_dict
from ..device import sdpa_without_cudnn
from ..drafter import DrafterConfig, Eagle3Drafter, init_drafter
from ..materialise import FINGERPRINT_KEY, embedding_fingerprint
from .cod import Elements
from .config import TrainConfig
from .data import Sample, read_torch
from .identity import data_fingerprint, target_identity
from .distributed import all_reduce_grads, rank_and_world
from .elements import cod_for_conversations, elements_for_conversations
from .features import packed_layout, target_batch, with_feature_noise
from .loss import LossParts, SeqData, padded_loss, sequence_loss, supervised_mask
from .provenance import CHECKPOINT_FIX, ResumeMismatch, checkpoint_size, resume_problems
from .replay import replay_prompts
from .schedule import Schedule, steps_that_fit

__all__ = ["LAYOUTS", "ResumeMismatch", "TrainConfig", "Trainer", "cod_for_conversations", "sample_order",
           "with_feature_noise"]

LAYOUTS = {"packed": sequence_loss, "padded": padded_loss}  # padded: per method


class _PassesOutOfMemory(RuntimeError):
    """A step's target and drafter passes ran out of GPU memory before anything was applied (its cause)."""


# SDPA without cuDNN on CUDA: every training step has new shapes (batch width, elements per row), and cuDNN's
# per-shape plan building held 56-81% of the host time on an H200 (2026-12-01, benchmarks/bench_train_step.py).
# A module-level name, so that benchmark can swap it out to time cuDNN.
sdpa_backends = sdpa_without_cudnn


def sample_order(samples: list[Sample], cfg: TrainConfig) -> list[int]:
    """The order conversations are visited in, a function of the seed alone (so resume is exact).

    With ``group_by_length``: shuffle, cut into chunks of 64 batches, sort each chunk by length,
    cut it into batches and shuffle the batches (the way HF's group_by_length works): a batch holds
    conversations of similar length, so the padded target and drafter passes waste little."""
    g = torch.Generator().manual_seed(cfg.seed)
    perm = torch.randperm(len(samples), generator=g)
    if not cfg.group_by_length:
        return perm.tolist()
    lengths = torch.tensor([min(s.ids.numel(), cfg.max_len) for s in samples])
    b = cfg.batch_size
    chunks = [c[lengths[c].argsort(descending=True, stable=True)] for c in perm.split(64 * b)]
    batches = [x for c in chunks for x in c.split(b)]
    full = [x for x in batches if x.numel() == b]
    rest = [x for x in batches if x.numel() < b]
    shuffled = [full[i] for i in torch.randperm(len(full), generator=g).tolist()]
    return torch.cat(shuffled + rest).tolist()


class Trainer:
    """Train one drafter; ``run()`` resumes from ``out_dir/checkpoint.pt`` when it exists.

    A checkpoint records what the run is made from (settings, draft vocabulary, a fingerprint of the data,
    the target's identity); one that differs from this run's is refused when the trainer is built
    (:class:`ResumeMismatch`, naming each difference) and again before it is loaded."""

    def __init__(self, target, samples: list[Sample], cfg: TrainConfig, out_dir: str | os.PathLike,
                 draft_ids: torch.Tensor, drafter: Eagle3Drafter | None = None,
                 val_replies: list[tuple[list[int], list[int]]] | None = None,
                 data_source: str | os.PathLike | None = None):
        if not samples:
            raise ValueError("no training samples; regenerate data first")
        if cfg.batch_size > len(samples):
            warnings.warn(f"batch_size {cfg.batch_size} is more than the {len(samples)} conversations in the data: "
                          "every step holds some of them twice (regenerate more, or a smaller --batch-size)",
                          stacklevel=2)
        if cfg.layout not in LAYOUTS:
            raise ValueError(f"unknown layout {cfg.layout!r}; use one of {', '.join(LAYOUTS)}")
        share = cfg.batch_size // rank_and_world()[1]   # the smallest share of a process: every rank checks alike
        if not 1 <= cfg.micro_batches <= share:
            raise ValueError(f"micro_batches={cfg.micro_batches}: each optimiser step's {share} conversations "
                             f"(of batch_size={cfg.batch_size}) split into 1 to {share} micro-batches; "
                             "set micro_batches in that range")
        self.target, self.samples, self.cfg = target, samples, cfg
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.device = target.device
        target.model.requires_grad_(False)              # the target is frozen; its embedding is shared
        self.draft_ids = torch.as_tensor(draft_ids).sort().values
        if cfg.share_lm_head and cfg.draft_vocab_size != target.vocab_size:
            raise ValueError(f"share_lm_head drafts over the target's whole vocabulary: set draft_vocab_size="
                             f"{target.vocab_size} (got {cfg.draft_vocab_size})")
        drafter = self._new_drafter() if drafter is None else self._check_vocab(drafter)
        self.drafter = drafter.to(self.device).train()
        params = [p for p in self.drafter.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.95))
        # The cosine ends at schedule.total: the config's, or fewer when run() fits a time budget (the
        # config itself is never changed). A lambda, so the scheduler's state holds none of it.
        self.schedule = Schedule(cfg.warmup_steps, cfg.steps)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda step: self.schedule(step))
        self.step = 0
        self.micro_batches = cfg.micro_batches          # doubled by a step that runs out of GPU memory
        self.history: list[dict] = []
        self.order = sample_order(samples, cfg)
        # (prompt ids, greedy reply with val_k + 1 tokens to spare): see peagle_lab.train.replay.greedy_replies
        self.val_replies = val_replies or []
        # what the run is made from, recorded in every checkpoint and compared on resume (data_source: the
        # --data folder, for the message only)
        self.provenance = {"data_fingerprint": data_fingerprint(samples), "target": target_identity(target),
                           "data_source": None if data_source is None else str(data_source)}
        if rank_and_world()[0] == 0:                    # a save killed mid-write left its temp file: not a checkpoint
            for stale in self.checkpoint_path.parent.glob(self.checkpoint_path.name + ".tmp-*"):
                warnings.warn(f"removed {stale.name}, half of a save that was killed ({checkpoint_size(stale)}); "
                              f"{self.checkpoint_path.name} itself is the last whole save", stacklevel=2)
                stale.unlink(missing_ok=True)
        if self.checkpoint_path.exists():              # refuse a mismatched resume now, before any work
            self.check_resume(read_torch(self.checkpoint_path, CHECKPOINT_FIX, map_location="cpu", weights_only=False,
                                         mmap=True))

    def _new_drafter(self) -> Eagle3Drafter:
        """A fresh drafter of the config's shape for this target, drafting over ``draft_ids``."""
        cfg, target = self.cfg, self.target
        if cfg.method == "dspark":
            from ..dspark import DSparkConfig, init_dspark
            dcfg = DSparkConfig.for_target(target, num_layers=cfg.num_layers, draft_vocab_size=cfg.draft_vocab_size,
                                           intermediate_size=cfg.intermediate_size, markov_rank=cfg.markov_rank,
                                           block_size=cfg.max_depth, mask_token_id=cfg.mask_token_id)
            drafter = init_dspark(dcfg, target, seed=cfg.seed)
            drafter.set_draft_vocab(self.draft_ids)
            drafter.markov_head.requires_grad_(cfg.markov_head)     # off: markov_w2 stays zero, no bias at all
            return drafter
        dcfg = DrafterConfig.for_target(target, num_layers=cfg.num_layers, draft_vocab_size=cfg.draft_vocab_size,
                                        parallel_drafting=cfg.method == "peagle",
                                        intermediate_size=cfg.intermediate_size,
                                        trained_depth=cfg.max_depth if cfg.method == "peagle" else None,
                                        has_embed_tokens=False, has_lm_head=not cfg.share_lm_head,
                                        mask_token_id=cfg.mask_token_id,
                                        learned_mask_embedding=cfg.learn_mask_embedding)
        drafter = init_drafter(dcfg, target, seed=cfg.seed)
        drafter.set_draft_vocab(self.draft_ids)
        return drafter

    def _check_vocab(self, drafter: Eagle3Drafter) -> Eagle3Drafter:
        """Fine-tuning: the drafter's own draft vocabulary must be ``draft_ids``."""
        slots = torch.arange(drafter.cfg.draft_vocab_size, device=drafter.fc.weight.device)
        if not torch.equal(drafter.to_target_ids(slots).cpu(), self.draft_ids.cpu()):
            raise ValueError("the drafter's draft vocabulary differs from draft_ids: pass its own ids "
                             "(drafter.to_target_ids(torch.arange(Vd))) to fine-tune it")
        return drafter

    # ----------------------------------------------------------------------------- one step
    def batch_for(self, step: int) -> list[Sample]:
        n, b = len(self.order), self.cfg.batch_size
        return [self.samples[self.order[(step * b + i) % n]] for i in range(b)]

    def train_step(self) -> dict:
        """One optimiser step. Under torchrun each process takes every world-th conversation of the
        global batch; the loss is divided by the *global* count of supervised elements and the
        gradients are summed across processes, so the step equals the single-process one.

        A step whose passes run out of GPU memory is taken again in twice the micro-batches (the same gradient:
        nothing was applied yet, and each conversation's COD and noise are seeded by the step and its index),
        and the run goes on with that many. Out of memory in one conversation a slice, in the optimiser's update,
        or under torchrun (where every process must split alike) is raised."""
        while True:
            try:
                with sdpa_backends(self.device):
                    return self._train_step()
            except _PassesOutOfMemory as e:
                share = self.cfg.batch_size // rank_and_world()[1]
                if self.micro_batches >= share or rank_and_world()[1] > 1:
                    raise e.__cause__ from None
            self.opt.zero_grad(set_to_none=True)        # outside the handler: the failed try's tensors are gone
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            before, self.micro_batches = self.micro_batches, min(share, 2 * self.micro_batches)
            warnings.warn(f"step {self.step + 1} ran out of GPU memory in {before} micro-batch(es); taking it "
                          f"again in {self.micro_batches} (the same gradient, less memory). Start with "
                          f"--set micro_batches={self.micro_batches} to skip the failed try", stacklevel=2)

    def _elements(self, batch: list[Sample], ids: list[int], step: int) -> tuple[Elements, int]:
        """The COD elements of the conversations ``ids`` (indices in the global batch) and how many of them are
        supervised, from the tokens alone (no target pass): each conversation's elements depend on its index,
        not on which process or micro-batch packs it."""
        tokens, supervised, doc = packed_layout([batch[i] for i in ids], self.cfg.max_len)
        layout = SeqData(tokens, torch.empty(0), torch.empty(0), supervised, doc)
        el = elements_for_conversations(layout, self.cfg, step, ids)
        return Elements(el.anchor.to(self.device), el.depth.to(self.device), el.doc.to(self.device)), \
            int(supervised_mask(el, layout).sum())

    def _features(self, batch: list[Sample], ids: list[int], step: int) -> SeqData:
        """The target's features of the conversations ``ids``, with the recipe's noise (seeded per conversation)."""
        cfg = self.cfg
        data = target_batch(self.target, [batch[i] for i in ids], self.draft_ids, cfg.max_len, bf16=cfg.target_bf16)
        if cfg.hidden_noise > 0:
            data = with_feature_noise(data, cfg.hidden_noise, seed=cfg.seed * 1_000_003 + step, global_ids=ids)
        return data

    def _train_step(self) -> dict:
        cfg, step = self.cfg, self.step
        rank, world = rank_and_world()
        t0 = time.perf_counter()
        global_ids = list(range(rank, cfg.batch_size, world))
        batch = self.batch_for(step)
        # micro-batches: this process's conversations in consecutive slices, each through the target and the
        # drafter forward and backward on its own (peak memory follows the largest slice); every slice's loss is
        # divided by the count of the whole global batch, so the summed gradient is the one-pass gradient
        # (tests/test_trainer.py)
        m, n = self.micro_batches, len(global_ids)
        slices = [global_ids[i * n // m:(i + 1) * n // m] for i in range(m)]
        elements = [self._elements(batch, ids, step) for ids in slices]
        count = torch.tensor([sum(c for _, c in elements)], device=self.device)
        if world > 1:                                   # on the run's device: NCCL reduces CUDA tensors only
            dist.all_reduce(count)
        count = int(count)
        self.opt.zero_grad(set_to_none=True)
        use_amp = cfg.amp_bf16 and self.device.type == "cuda"
        parts: LossParts | None = None
        try:
            for ids, (el, _) in zip(slices, elements):
                data = self._features(batch, ids, step)
                with torch.autocast("cuda", dtype=torch.bfloat16, enabled=use_amp):
                    # Both layouts give the same loss and gradient (tests/test_partition.py). Packed: one pass,
                    # (sum E_i)^2 attention, with P-EAGLE's mask as a sparse flex-attention BlockMask on CUDA
                    # ("auto"), optionally in num_segments partitions. Padded: B * E_max^2 in one pass (EAGLE-3:
                    # one pass per depth, rows per conversation); it ignores num_segments.
                    got = LAYOUTS[cfg.layout](self.drafter, el, data, method=cfg.method, max_depth=cfg.max_depth,
                                              num_segments=cfg.num_segments, normalizer=max(count, 1),
                                              backward=True, attention="auto")
                parts = got if parts is None else parts + got
                del data, got
        except torch.cuda.OutOfMemoryError as e:        # nothing applied yet: train_step may take it again
            raise _PassesOutOfMemory() from e
        if world > 1:
            all_reduce_grads(self.drafter.parameters())
            stats = torch.cat([parts.loss_sum.detach().float().reshape(1).to(self.device),
                               parts.correct.float().to(self.device), parts.total.float().to(self.device)])
            dist.all_reduce(stats)
            d = cfg.max_depth
            stats = stats.cpu()
            parts = LossParts(stats[0], count, stats[1:1 + d].long(), stats[1 + d:].long())
        gnorm = torch.nn.utils.clip_grad_norm_(self.drafter.parameters(), cfg.grad_clip)
        self.opt.step()
        self.sched.step()
        self.step += 1
        row = {"step": self.step, "loss": float(parts.loss_sum) / max(count, 1),
               "elements": sum(len(el) for el, _ in elements),
               "supervised": count, "grad_norm": float(gnorm), "lr": self.sched.get_last_lr()[0], "micro_batches": m,
               "acc_per_depth": (parts.correct.float() / parts.total.clamp_min(1)).tolist(),
               "seconds": time.perf_counter() - t0}
        self.history.append(row)
        return row

    @torch.no_grad()
    def validation_al(self) -> float | None:
        """The engine's greedy AL at ``val_k`` on the validation replies, by replay (one pass per reply)."""
        if not self.val_replies:
            return None
        k = min(self.cfg.val_k, self.cfg.max_depth) if self.cfg.method != "eagle" else self.cfg.val_k
        prompts, replies = zip(*self.val_replies)
        budget = len(replies[0]) - self.cfg.val_k - 1       # greedy_replies gives every reply the same length
        self.drafter.eval()
        try:
            total, _ = replay_prompts(self.target, self.drafter, list(prompts), list(replies), method=self.cfg.method,
                                      k=k, max_new_tokens=budget)
        finally:
            self.drafter.train()
        return total.stats.acceptance_length

    # ----------------------------------------------------------------------------- checkpoints
    @property
    def checkpoint_path(self) -> Path:
        return self.out_dir / "checkpoint.pt"

    def save_checkpoint(self) -> None:
        rank, world = rank_and_world()
        if rank != 0:                                       # one writer; the others wait for it
            dist.barrier()
            return
        state = {"drafter": self.drafter.state_dict(), "opt": self.opt.state_dict(), "sched": self.sched.state_dict(),
                 "step": self.step, "history": self.history, "config": asdict(self.cfg),
                 "draft_ids": self.draft_ids, "drafter_config": asdict(self.drafter.cfg),
                 "provenance": self.provenance}
        with atomic_file(self.checkpoint_path) as tmp:     # a kill mid-save keeps the previous checkpoint
            torch.save(state, tmp)
        if world > 1:
            dist.barrier()

    def check_resume(self, state: dict) -> None:
        """Refuse (:class:`ResumeMismatch`, naming every difference) a checkpoint made with other training
        settings, another draft vocabulary, other data or another target. A checkpoint older than the data
        and target record is resumed with a warning (its draft vocabulary is still compared)."""
        problems = resume_problems(state, self.cfg, self.provenance, self.draft_ids)
        if "provenance" not in state and not getattr(self, "_warned_unrecorded", False):   # warned, refused or not
            self._warned_unrecorded = True
            warnings.warn(f"{self.checkpoint_path} records neither its data nor its target (written by an older "
                          "peagle-lab); resuming without checking them", stacklevel=2)
        if problems:
            raise ResumeMismatch(f"{self.checkpoint_path} cannot be resumed by this run: " + "; ".join(problems) +
                                 ". Resume with the settings, data (--data) and target (--target) it was made with, "
                                 "or use a fresh --out folder")

    def load_checkpoint(self) -> bool:
        if not self.checkpoint_path.exists():
            return False
        state = read_torch(self.checkpoint_path, CHECKPOINT_FIX, map_location=self.device, weights_only=False)
        self.check_resume(state)
        self.drafter.load_state_dict(state["drafter"])
        self.opt.load_state_dict(state["opt"])
        self.sched.load_state_dict(state["sched"])
        self.step, self.history = state["step"], state["history"]
        return True

    # ----------------------------------------------------------------------------- the plan a driver may change
    @property
    def total_steps(self) -> int:
        """The step the cosine ends at: the config's ``steps``, or where a time budget (or a driver) refit it."""
        return self.schedule.total

    def plan(self, total: int) -> None:
        """End the cosine at ``total`` (at least one step past this one): a driver's refit
        (:func:`~peagle_lab.train.schedule.steps_that_fit`)."""
        self.schedule.total = max(self.step + 1, int(total))

    def add_samples(self, new: list[Sample]) -> None:
        """Grow the pool: ``new`` samples go behind every one already there, in the trainer's own order
        (:func:`sample_order`), so one pass over a growing pool stays one pass (no sample twice)."""
        base = len(self.samples)
        self.samples.extend(new)
        self.order.extend(base + i for i in sample_order(new, self.cfg))

    def start_at(self, step: int, history: list[dict] = ()) -> None:
        """Go on from an earlier run's ``step`` (its weights, and optimiser if it had one, already loaded): the earlier
        steps hold no sample of this pool, their ``history`` comes first, and the learning rate warms up again from
        ``step`` along the cosine (what matters when the optimiser starts afresh)."""
        self.step, self.history = step, [*history, *self.history]
        self.order = [None] * (step * self.cfg.batch_size) + self.order
        self.schedule.restart_at(step)
        self.sched.last_epoch = step - 1
        with warnings.catch_warnings():                 # no optimiser step yet in this process: expected here
            warnings.simplefilter("ignore", UserWarning)
            self.sched.step()

    # ----------------------------------------------------------------------------- loop
    def run(self, steps: int | None = None, progress: bool = True, stop_after: int | None = None,
            time_budget_s: float | None = None, *, until: Callable[[], bool] | None = None,
            on_step: Callable[["Trainer", dict], bool | None] | None = None) -> list[dict]:
        """Train until ``steps`` (default: the config's); resume first if a checkpoint exists.

        ``time_budget_s`` (for lent GPUs with a hard time limit): after 10 steps the step time is
        measured (steps 4-13) and the run shortened to fit, so the LR schedule still completes.
        The hooks make a study a short caller rather than another loop: ``until()`` is asked before each
        step (True stops: a deadline, a pool spent; it may wait for more data, :meth:`add_samples`), and
        ``on_step(trainer, row)`` after each step and its checkpoint (False stops: exports at milestones,
        a refit of its own, :meth:`plan`).
        """
        total = requested = steps or self.cfg.steps
        self.load_checkpoint()
        if self.step > total:
            warnings.warn(f"{self.checkpoint_path} is at step {self.step}, past the {total} steps asked for: nothing "
                          f"to train, and what follows uses the drafter of step {self.step} (ask for more steps to "
                          "go on; a fresh --out starts again)", stacklevel=2)
        t_start, t_warm = time.perf_counter(), None
        bar = tqdm(total=total, initial=self.step, desc=f"train {self.cfg.method}", disable=not progress)
        done_now = 0
        while self.step < total and not (until is not None and until()):
            row = self.train_step()
            done_now += 1
            bar.update(1)
            bar.set_postfix(loss=f"{row['loss']:.3f}", acc0=f"{row['acc_per_depth'][0]:.2f}")
            if self.step % self.cfg.checkpoint_every == 0 or self.step == total:
                self._checkpoint(row, bar)
            if on_step is not None and on_step(self, row) is False:
                break
            if stop_after is not None and done_now >= stop_after:
                break
            if done_now == 3:
                t_warm = time.perf_counter()                 # first steps pay for start-up (and compiling)
            if time_budget_s and done_now >= 13 and (done_now - 13) % 100 == 0:
                # re-fit every 100 steps: step times drift (recompiles, a neighbour on the same GPU)
                per_step = (time.perf_counter() - t_warm) / (done_now - 3)
                left = time_budget_s - (time.perf_counter() - t_start)
                total = bar.total = self.schedule.total = steps_that_fit(self.step, per_step, left, requested)
        bar.close()
        return self.history

    def _checkpoint(self, row: dict, bar) -> None:
        """At a checkpoint: the memory peak (every process's), the validation AL (rank 0), then the save."""
        if self.device.type == "cuda":
            row["peak_gib"] = torch.cuda.max_memory_allocated(self.device) / 2**30
            rank, world = rank_and_world()
            if world > 1:                        # every process's peak, in rank order (rank 0 keeps the record)
                peaks = torch.zeros(world, device=self.device, dtype=torch.float64)
                peaks[rank] = row["peak_gib"]
                dist.all_reduce(peaks)
                row["peak_gib_per_rank"] = peaks.tolist()
        if self.val_replies and rank_and_world()[0] == 0:
            row["val_al"] = self.validation_al()
            bar.write(f"step {self.step}: validation AL {row['val_al']:.3f} at K={self.cfg.val_k}")
        self.save_checkpoint()

    def export(self, path: str | os.PathLike, dtype: torch.dtype = torch.bfloat16, *, overwrite: bool = False,
               flag: str = "overwrite=True") -> Path:
        """Write the vLLM-layout drafter (atomically) plus ``training.json`` (config and history). ``path`` must be
        new, empty or an earlier export (:func:`~peagle_lab.checkpoint.save_drafter`) unless ``overwrite``."""
        self.drafter.eval()
        every = max(1, len(self.history) // 200)            # keep the shipped record small (and every validation row)
        rows = [r for i, r in enumerate(self.history) if i % every == 0 or "val_al" in r]
        record = json.dumps({"config": {**asdict(self.cfg), "steps": self.total_steps}, "steps": self.step,
                             "history": rows})
        if self.cfg.method == "dspark":
            from ..dspark import save_dspark
            try:
                return save_dspark(self.drafter.cpu(), path, dtype=dtype, extra_files={"training.json": record},
                                   overwrite=overwrite, flag=flag)
            finally:
                self.drafter.to(self.device)
        config = vllm_config_dict(self.drafter.cfg, str(dtype).removeprefix("torch."))
        if self.drafter.mask_embedding is not None:          # materialise_for_vllm() refuses another target's table
            config[FINGERPRINT_KEY] = embedding_fingerprint(self.target.model.get_input_embeddings().weight)
        try:
            out = save_drafter(self.drafter.cpu(), path, dtype=dtype, extra_files={"training.json": record},
                               config=config, overwrite=overwrite, flag=flag)
        finally:
            self.drafter.to(self.device)
        return out
