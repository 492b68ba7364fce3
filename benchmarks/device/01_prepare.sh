#!/usr/bin/env bash
# Device call 1 of 3 (H200 via the `device` tool): park the first half of the target's GGUF and
# install the two wheels the GPU image lacks. Carry: parts/gguf.part-aa parts/wheels
set -euxo pipefail
mkdir -p /tmp/pk && cp parts/gguf.part-aa /tmp/pk/
pip install -q --no-deps parts/wheels/*.whl
nvidia-smi --query-gpu=name,memory.total --format=csv
python -c "import torch, transformers, gguf; print(torch.__version__, transformers.__version__, torch.cuda.get_device_name(0))"
