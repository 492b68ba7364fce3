#!/usr/bin/env bash
# Install CUDA vLLM from the parked bundle (/tmp/vp/vc.part-NN, made by make_vllm_bundle.sh) into the GPU image's
# Python, offline and beside its own torch; a no-op when vLLM imports already. Sourced by 31_vllm_cuda.sh and
# data_scale.sh.
if ! python -c "import vllm" 2>/dev/null; then
  n=$(ls /tmp/vp | grep -c "vc.part"); want=${PARTS:-15}
  [ "$n" -ge "$want" ] || { echo "only $n of $want parts parked: park the missing ones first"; ls /tmp/vp; exit 1; }
  t=$SECONDS
  cat /tmp/vp/vc.part-* | tar xf - -C /tmp/vp || exit 1
  python -m pip install -q --no-deps --no-index --disable-pip-version-check /tmp/vp/b/wheels/*.whl /tmp/vp/b/vw/*.whl \
    || exit 1
  SITE=$(python -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
  for z in /tmp/vp/b/vllm.tar.zst /tmp/vp/b/cut.tar.zst; do
    python - "$z" "$SITE" <<'PY' || exit 1
import sys, tarfile, zstandard
with open(sys.argv[1], "rb") as f, zstandard.ZstdDecompressor(max_window_size=1 << 27).stream_reader(f) as r:
    tarfile.open(fileobj=r, mode="r|").extractall(sys.argv[2])
PY
  done
  python -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)" || exit 1
  echo "installed in $((SECONDS - t)) s"
fi
