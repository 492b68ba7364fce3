"""The shipped pair's recipe (docs/drafter-levers.md; each drafter's training.json holds its exact settings):
16,384 ShareGPT prompts answered by the target (10,240 greedy + 6,144 at T=0.7), then P-EAGLE (3 layers, MLP 256)
and EAGLE-3 (1 layer, MLP 1024) with a 4096-token draft vocabulary, 20 minutes each, then their AL at K=7 on all
80 MT-Bench prompts. A CUDA GPU; on an H200 about an hour in all.

    python benchmarks/shipped_pair.py --work runs/shipped
"""
from pathlib import Path

from figure import args, peagle_lab, record

a = args(__doc__, "out/shipped_pair.json", work="runs/shipped", minutes=20)
dev, w = ("cuda" if a.device == "auto" else a.device), a.work
regen = ["regenerate", "--prompts", "sharegpt", "--max-new-tokens", "256", "--batch-size", "512", "--shard-size",
         "512", "--device", dev, "--dtype", "bfloat16"]
peagle_lab(regen + ["--num-prompts", "10240", "--out", f"{w}/data"])
peagle_lab(regen + ["--skip-prompts", "10240", "--num-prompts", "6144", "--temperature", "0.7", "--seed", "1",
                    "--out", f"{w}/data-t07"])
mix = Path(w, "mix")                                 # `train --data` reads one folder: link both sets into it
mix.mkdir(parents=True, exist_ok=True)
for name in ("data", "data-t07"):
    for shard in sorted(Path(w, name).glob("shard-*.pt")):
        link = mix / f"shard-{name}-{shard.name[len('shard-'):]}"
        if not link.exists():
            link.symlink_to(shard.resolve())
common = ["--data", str(mix), "--device", dev, "--batch-size", "32", "--draft-vocab-size", "4096", "--max-len",
          "768", "--max-minutes", str(a.minutes), "--set", "group_by_length=true", "--set", "max_depth=8",
          "--set", "warmup_steps=100"]
peagle_lab(["train", "--preset", "peagle", "--num-layers", "3", "--set", "intermediate_size=256", *common,
            "--out", f"{w}/peagle", "--export", f"{w}/peagle-smollm2"])
peagle_lab(["train", "--preset", "eagle", "--num-layers", "1", "--set", "intermediate_size=1024", *common,
            "--out", f"{w}/eagle", "--export", f"{w}/eagle-smollm2"])
record(["eval", f"{w}/peagle-smollm2", f"{w}/eagle-smollm2", "--prompts", "mt-bench", "--num-prompts", "80",
        "--k", "7", "--max-new-tokens", "128", "--device", dev], a.out)
