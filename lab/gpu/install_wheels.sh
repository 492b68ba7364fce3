#!/usr/bin/env bash
# The packages the GPU image lacks (gguf, accelerate, nvidia-mtbench-evaluator), offline: from parts/wheels when the
# call carries it, else from /tmp/pk/wheels where 06_park.sh parked it (the tree, one GGUF part and all the wheels
# do not fit in one call's 64 MiB). Every script that needs them runs this first.
WHL=parts/wheels; [ -d "$WHL" ] || WHL=/tmp/pk/wheels
if ls "$WHL"/*.whl > /dev/null 2>&1; then python -m pip install -q --no-deps "$WHL"/*.whl; else echo "no wheels in parts/wheels or /tmp/pk/wheels"; fi
