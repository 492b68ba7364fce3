"""One point pair of the data-scaling curve (docs/data-scaling.md) on your own CUDA GPU: regenerate ShareGPT
conversations turn by turn with vLLM at T=0.7 (one seed per pass over the 17,393 conversations, so no reply repeats),
train P-EAGLE (the `peagle` preset) and EAGLE-3 (the `eagle` preset) on them, each sample seen once, batch 64, and
replay both at K 3/5/7 on all 80 MT-Bench prompts. The recorded curve went to 50M reply tokens (`--seeds 8`: about
an hour of regeneration and half an hour of training per method on an H200); `--seeds 1` gives its ~7M point.

    python benchmarks/data_scaling.py --work runs/scale --seeds 1
"""
from pathlib import Path

from figure import args, peagle_lab, record

a = args(__doc__, "out/data_scaling.json", work="runs/scale", seeds=1, k="3,5,7")
dev, w = ("cuda" if a.device == "auto" else a.device), Path(a.work)
mix = w / "mix"
mix.mkdir(parents=True, exist_ok=True)
for seed in range(1, a.seeds + 1):
    out = w / f"data-seed{seed}"
    peagle_lab(["regenerate", "--engine", "vllm", "--prompts", "sharegpt", "--all-turns", "--num-prompts", "17393",
                "--temperature", "0.7", "--seed", str(seed), "--max-new-tokens", "256", "--max-prompt-tokens", "640",
                "--batch-size", "1024", "--shard-size", "2048", "--device", dev, "--dtype", "bfloat16",
                "--kv-cache-gib", "16", "--out", str(out)])
    for shard in sorted(out.glob("shard-*.pt")):                     # `train --data` reads one folder
        link = mix / f"shard-s{seed}-{shard.name[len('shard-'):]}"
        if not link.exists():
            link.symlink_to(shard.resolve())
from peagle_lab.train.data import load_samples

steps = max(1, len(load_samples(mix)) // 64)                       # one pass: each sample seen once at batch 64
drafters = []
for preset in ("peagle", "eagle"):
    peagle_lab(["train", "--preset", preset, "--data", str(mix), "--device", dev, "--batch-size", "64",
                "--max-len", "768", "--steps", str(steps), "--out", str(w / preset),
                "--export", str(w / f"{preset}-1pass")])
    drafters.append(str(w / f"{preset}-1pass"))
for k in a.k.split(","):
    record(["eval", *drafters, "--prompts", "mt-bench", "--num-prompts", "80", "--k", k, "--max-new-tokens", "128",
            "--device", dev], Path(a.out).with_name(f"{Path(a.out).stem}_k{k}.json"))
