#!/usr/bin/env bash
# Started by gpu.sh (PIPELINE=c1_repeats) under setsid: the concurrency-1 spread notebook 05 cites. AR and EAGLE-3 K=3
# on both runners and P-EAGLE K=3 on V1, 24 MT-Bench prompts x 256 tokens, three interleaved rounds (lab/dspark/serve.py).
# The servers start at once; their loads wait for the notebooks (lab/gpu/32_notebooks_cuda.sh) to finish.
source "$(dirname "$0")/prelude.sh"
touch $W/regen.done
python lab/dspark/serve.py --dspark $W/shipped/dspark-smollm2 --only ar-v1,ar-v2,eagle-k3-v1,eagle-k3-v2,peagle-k3-v1 \
  --sets mt-bench:24 --rounds 3 --gate /tmp/nbout/done --out $W/vllm_cuda_c1_repeats.json > $W/serve.log 2>&1
tail -n 8 $W/serve.log
stamp "served"
touch $W/done
