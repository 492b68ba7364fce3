"""Is a drafter short of data or of capacity? Its training-time agreement on seen vs unseen text.

For each drafter, the trainer's own loss and per-depth top-1 agreement with the target (the numbers
the training log prints) on three sets of SmolLM2 greedy replies:

* ``train``: conversations the drafter trained on (from the training shards, ``--train-data``);
* ``sharegpt-heldout``: ShareGPT prompts that were never in training (not among ``--train-prompts``);
* ``mt-bench``: the MT-Bench first turns the validation AL is measured on.

A big train -> held-out drop says "more data"; a held-out -> MT-Bench drop says "other data"; low
numbers everywhere say "a bigger drafter or more steps". Replies are regenerated on this machine
(greedy, cached in ``--cache``); COD elements are drawn with a fixed seed, so every drafter sees the
same elements. CPU is fine (no gradients).

    python benchmarks/eval_generalization.py --train-data runs/mix --train-prompts runs/sharegpt.jsonl \
        peagle=peagle_lab/drafters/peagle-smollm2 eagle=peagle_lab/drafters/eagle-smollm2 \
        --json benchmarks/results/drafter_generalization.json
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from peagle_lab.checkpoint import load_drafter  # noqa: E402
from peagle_lab.prompts import load_prompts, read_jsonl  # noqa: E402
from peagle_lab.target import Target  # noqa: E402
from peagle_lab.train.data import load_samples, regenerate  # noqa: E402
from peagle_lab.train.features import target_batch  # noqa: E402
from peagle_lab.train.loss import padded_loss, supervised_mask  # noqa: E402
from peagle_lab.train.trainer import TrainConfig, cod_for_conversations  # noqa: E402


@torch.no_grad()
def agreement(target, drafter, samples, method: str, max_depth: int, batch: int = 8) -> dict:
    """Mean KL and top-1 agreement per depth over ``samples``, as the trainer computes them."""
    cfg = TrainConfig(method=method, max_depth=max_depth, batch_size=batch, seed=1234)
    ids = drafter.to_target_ids(torch.arange(drafter.cfg.draft_vocab_size))
    loss, count = 0.0, 0
    correct, total = torch.zeros(max_depth), torch.zeros(max_depth)
    for step, i in enumerate(range(0, len(samples), batch)):
        chunk = samples[i: i + batch]
        data = target_batch(target, chunk, ids, cfg.max_len)
        el = cod_for_conversations(data, cfg, step, list(range(len(chunk))))
        n = int(supervised_mask(el, data).sum())
        parts = padded_loss(drafter, el, data, method=method, max_depth=max_depth, normalizer=n, backward=False)
        loss += float(parts.loss_sum)
        count += parts.count
        correct += parts.correct.float()
        total += parts.total.float()
    return {"loss": loss / max(count, 1), "supervised": count,
            "acc_per_depth": [round(float(c / t), 4) if t else None for c, t in zip(correct, total)]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("drafters", nargs="+", help="NAME=FOLDER (a name containing 'peagle' is scored as P-EAGLE)")
    ap.add_argument("--train-data", required=True, help="the training shards (shard-*.pt)")
    ap.add_argument("--train-prompts", required=True, help="JSONL of the prompts training used (held-out = the rest)")
    ap.add_argument("--num", type=int, default=48, help="conversations per set")
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--cache", default="/tmp/peagle-generalization")
    ap.add_argument("--json", required=True)
    args = ap.parse_args()
    target = Target.load()
    seen = {p[:60] for p in read_jsonl(args.train_prompts)}
    heldout = [p for p in load_prompts("sharegpt") if p[:60] not in seen][: args.num]
    train = load_samples(args.train_data)
    sets = {"train": random.Random(0).sample(train, args.num)}
    for name, prompts in (("sharegpt-heldout", heldout), ("mt-bench", load_prompts("mt-bench", args.num))):
        regenerate(target, prompts, Path(args.cache) / name, max_new_tokens=args.max_new_tokens, batch_size=16,
                   shard_size=args.num)
        sets[name] = load_samples(Path(args.cache) / name)
    results = {}
    for spec in args.drafters:
        name, path = spec.split("=", 1)
        drafter = load_drafter(path, target).eval()
        method = "peagle" if "peagle" in name else "eagle"
        depth = drafter.cfg.trained_depth or 8
        results[name] = {s: agreement(target, drafter, samples, method, depth) for s, samples in sets.items()}
        brief = {s: (round(r["loss"], 3), r["acc_per_depth"][:4]) for s, r in results[name].items()}
        print(name, json.dumps(brief), flush=True)
    out = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "machine": "this CPU VM (no gradients; numbers do not depend on the machine)",
           "command": "python benchmarks/eval_generalization.py " + " ".join(sys.argv[1:]),
           "what": __doc__.split("\n\n")[0].replace("\n", " "),
           "sets": {s: {"conversations": len(v), "reply_tokens": sum(x.ids.numel() - x.prompt_len for x in v)}
                    for s, v in sets.items()},
           "drafters": dict(spec.split("=", 1) for spec in args.drafters), "results": results}
    Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
