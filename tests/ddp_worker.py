"""Run by tests/test_training.py under `torchrun --nproc_per_node N`: a few training steps on a tiny
target, then rank 0 saves the drafter's state dict to argv[1]."""
import sys

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from helpers import tiny_target  # noqa: E402
from test_training import _samples  # noqa: E402

from peagle_lab.train.trainer import TrainConfig, Trainer, finish_distributed, init_distributed, rank_and_world  # noqa: E402
from peagle_lab.train.vocab import build_draft_vocab, token_counts  # noqa: E402

init_distributed()
torch.manual_seed(0)
tgt = tiny_target(vocab=50, seed=0)
ids, _ = build_draft_vocab(token_counts(_samples(), 50) + 1, 40)
cfg = TrainConfig(method=sys.argv[3], num_layers=2, draft_vocab_size=40, max_depth=4, steps=4, batch_size=4, max_len=30,
                  lr=3e-3, warmup_steps=2, checkpoint_every=2, seed=1)
trainer = Trainer(tgt, _samples(), cfg, sys.argv[2], ids)
trainer.run(progress=False)
if rank_and_world()[0] == 0:
    torch.save({"state": trainer.drafter.state_dict(), "losses": [r["loss"] for r in trainer.history]}, sys.argv[1])
finish_distributed()
