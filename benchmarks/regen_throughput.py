"""Regeneration speed on a CUDA GPU (docs/data-scaling.md): the same 512 ShareGPT first turns answered greedily by
transformers' `generate` (batch 256) and by vLLM's offline engine (one batch), bf16, 256 new tokens; reply
tokens/s of each, as `regenerate` prints and records them (regen_throughput_h200.json).

    python benchmarks/regen_throughput.py --work runs/regen
"""
import json
import time
from pathlib import Path

from figure import args, own_command, peagle_lab

a = args(__doc__, "out/regen_throughput.json", work="runs/regen")
dev, rows, runs = ("cuda" if a.device == "auto" else a.device), {}, []
for engine, batch in (("transformers", "256"), ("vllm", "512")):
    argv = ["regenerate", "--engine", engine, "--prompts", "sharegpt", "--num-prompts", "512", "--max-new-tokens",
            "256", "--batch-size", batch, "--device", dev, "--dtype", "bfloat16", "--out", f"{a.work}/{engine}"]
    start = time.perf_counter()
    peagle_lab(argv)
    wall = time.perf_counter() - start
    record = json.loads(Path(a.work, engine, "regenerate.json").read_text())
    rows[engine] = {"wall_s": round(wall, 1), "regenerate": record}
    runs.append("peagle-lab " + " ".join(argv))
Path(a.out).parent.mkdir(parents=True, exist_ok=True)
Path(a.out).write_text(json.dumps({"command": own_command(), "runs": runs, "ab": rows}, indent=1) + "\n")
