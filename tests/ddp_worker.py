"""Run by tests/test_trainer.py under `torchrun --nproc_per_node N` (N = 1 or 2). argv: OUT RUN_DIR METHOD.

1. The gradient oracle: one optimiser step of a trainer with feature noise and no clipping (the recipe's
   noise path); every rank saves, to OUT.grads-rank{R}.pt, its own share of the gradient (just before
   the all-reduce) and the all-reduced gradient the optimiser used.
2. A few training steps with checkpoints; rank 0 saves the drafter's state dict and losses to OUT.

Device: ``PEAGLE_TEST_DEVICE`` (default cpu: gloo). With ``cuda`` the tiny target and the drafter run on
GPU ``LOCAL_RANK % device_count``: NCCL when every rank has a GPU of its own, gloo over CUDA tensors with
``PEAGLE_DIST_BACKEND=gloo`` (two ranks on one GPU)."""
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]     # this tree's tests and package (not another installed copy)
from helpers import learnable_samples, tiny_target  # noqa: E402

import peagle_lab.train.trainer as trainer_module  # noqa: E402
from peagle_lab.train.distributed import finish_distributed, init_distributed, rank_and_world  # noqa: E402
from peagle_lab.train.trainer import TrainConfig, Trainer  # noqa: E402
from peagle_lab.train.vocab import build_draft_vocab, token_counts  # noqa: E402

out, run_dir, method = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
device = init_distributed(os.environ.get("PEAGLE_TEST_DEVICE", "cpu"))
rank, world = rank_and_world()
torch.manual_seed(0)
tgt = tiny_target(vocab=50, seed=0)
tgt.model.to(device)
ids, _ = build_draft_vocab(token_counts(learnable_samples(), 50) + 1, 40)
# fp32 everywhere (the bf16 switches act on CUDA only): the oracles compare sums taken in another order
common = dict(method=method, num_layers=2, draft_vocab_size=40, max_depth=4, batch_size=4, max_len=30, lr=3e-3,
              warmup_steps=2, seed=1, amp_bf16=False, target_bf16=False)

# 1. one step's gradients, before and after the all-reduce
grad_trainer = Trainer(tgt, learnable_samples(), TrainConfig(**common, steps=1, checkpoint_every=1, hidden_noise=0.05,
                                                    grad_clip=1e9), run_dir / "grads", ids)
names = {id(p): n for n, p in grad_trainer.drafter.named_parameters()}
local: dict[str, torch.Tensor] = {}
all_reduce_grads = trainer_module.all_reduce_grads


def spy(params):                                 # this rank's share, then the real all-reduce
    params = list(params)
    local.update({names[id(p)]: p.grad.detach().cpu().clone() for p in params if p.grad is not None})
    all_reduce_grads(params)


trainer_module.all_reduce_grads = spy
row = grad_trainer.train_step()                  # grad_clip 1e9: clipping scales by exactly 1
trainer_module.all_reduce_grads = all_reduce_grads
reduced = {n: p.grad.detach().cpu().clone() for n, p in grad_trainer.drafter.named_parameters() if p.grad is not None}
torch.save({"local": local, "reduced": reduced, "loss": row["loss"], "supervised": row["supervised"],
            "device": str(grad_trainer.device), "backend": dist.get_backend() if world > 1 else None, "world": world},
           f"{out}.grads-rank{rank}.pt")

# 2. a few steps with checkpoints
torch.manual_seed(0)
cfg = TrainConfig(**common, steps=4, checkpoint_every=2)
trainer = Trainer(tgt, learnable_samples(), cfg, run_dir / "train", ids)
trainer.run(progress=False)
if rank == 0:
    torch.save({"state": {k: v.cpu() for k, v in trainer.drafter.state_dict().items()},
                "losses": [r["loss"] for r in trainer.history]}, out)
finish_distributed()
