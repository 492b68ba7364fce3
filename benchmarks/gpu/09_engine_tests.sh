#!/usr/bin/env bash
# Device session C of 2026-12-01 (3rd), call 3 (calls 1-2: 06_park.sh with parts/gguf.part-00, then -01):
# the engine's test suite with the target and the drafters on the GPU (PEAGLE_TEST_DEVICE=cuda; the test
# helpers now put random drafters on the target's device: session B's run failed on exactly that).
# Carry: parts/gguf.part-02 (parts/wheels parked by 06_park.sh)
set -uxo pipefail
export PEAGLE_GGUF=${PEAGLE_GGUF:-/tmp/pk/SmolLM2-135M-Instruct.Q4_1.gguf} PEAGLE_CACHE=${PEAGLE_CACHE:-/tmp/pk/cache} PYTHONPATH=. PYTHONUNBUFFERED=1
bash benchmarks/gpu/install_wheels.sh
bash benchmarks/gpu/join_gguf.sh || exit 1
python -c "from peagle_lab.assets import resolve_target; print(resolve_target(None))" 2>&1 | tail -n 1
# TESTS / TESTS_S pick other files and a limit (2026-12-02, 14th session: the fast engine's suite with prompt graphs,
# TESTS="tests/test_fast_engine.py tests/test_cache_attention.py::test_auto_attention_picks_triton_on_cuda_only
# tests/test_cache_attention.py::test_bench_passes_attention_through" TESTS_S=185).
PEAGLE_TEST_DEVICE=cuda timeout ${TESTS_S:-150} python -m pytest -q -p no:cacheprovider --durations=8 \
  ${TESTS:-tests/test_engine.py tests/test_batch_engine.py} > "$OUT/gpu_engine_tests.log" 2>&1
tail -n 20 "$OUT/gpu_engine_tests.log"
echo "done at ${SECONDS} s"
