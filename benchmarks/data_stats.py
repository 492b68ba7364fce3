"""What the regenerated training data looks like: size, loops, length cap, draft-vocab coverage.

    python benchmarks/data_stats.py greedy=runs/data:256 sampled=runs/data-t07:384 \
        --json benchmarks/results/data_stats.json

Each argument is NAME=FOLDER:CAP (folder of ``peagle-lab regenerate`` shards, its --max-new-tokens).
A reply token counts as "in a loop" when the 8-gram that ends at it already appeared earlier in the
same reply: text the target repeats verbatim, which a drafter learns cheaply and which teaches it
little about fresh text. Coverage: the share of reply tokens that the ``Vd`` most frequent reply
tokens (over all folders given) cover.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json

import torch

from peagle_lab.train.data import load_samples
from peagle_lab.train.vocab import build_draft_vocab, token_counts

N = 8


def loop_tokens(reply: list[int]) -> int:
    seen, hits = set(), 0
    for t in range(N - 1, len(reply)):
        gram = tuple(reply[t - N + 1: t + 1])
        hits += gram in seen
        seen.add(gram)
    return hits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sets", nargs="+", help="NAME=FOLDER:CAP")
    ap.add_argument("--vocab-size", type=int, default=49152)
    ap.add_argument("--json", required=True)
    args = ap.parse_args()
    out, everything = {}, []
    for spec in args.sets:
        name, rest = spec.split("=", 1)
        folder, cap = rest.rsplit(":", 1)
        samples = load_samples(folder)
        everything += samples
        replies = [s.ids[s.prompt_len:].tolist() for s in samples]
        n_reply = sum(len(r) for r in replies)
        counts = token_counts(samples, args.vocab_size)
        out[name] = {"folder": folder, "conversations": len(samples), "tokens": sum(s.ids.numel() for s in samples),
                     "reply_tokens": n_reply,
                     "share_of_reply_tokens_in_8gram_loops": sum(map(loop_tokens, replies)) / n_reply,
                     "share_of_replies_at_the_cap": sum(len(r) >= int(cap) for r in replies) / len(replies),
                     "max_new_tokens": int(cap),
                     "draft_vocab_coverage_own": {v: build_draft_vocab(counts, v)[1] for v in (2048, 4096, 8192)}}
    if len(args.sets) > 1:
        counts = token_counts(everything, args.vocab_size)
        out["all"] = {"conversations": len(everything),
                      "reply_tokens": sum(s.ids.numel() - s.prompt_len for s in everything),
                      "draft_vocab_coverage": {v: build_draft_vocab(counts, v)[1] for v in (2048, 4096, 8192)}}
    result = {"date": dt.date.today().isoformat(), "machine": "this 2-core CPU VM",
              "command": "python benchmarks/data_stats.py " + " ".join(args.sets) + " --json " + args.json,
              "what": __doc__.splitlines()[0], "sets": out}
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
