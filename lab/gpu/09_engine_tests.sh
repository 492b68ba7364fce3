#!/usr/bin/env bash
# Engine test files with the target and the drafters on the GPU (PEAGLE_TEST_DEVICE=cuda), from the repository
# root; writes $OUT/gpu_engine_tests.log.
#   TESTS    the test files (default: tests/test_teaching.py tests/test_batched.py); the fast engine's:
#            TESTS="tests/test_fast_engine.py tests/test_cache_attention.py::test_auto_attention_picks_triton_on_cuda_only
#            tests/test_cache_attention.py::test_bench_passes_attention_through" TESTS_S=185
#   TESTS_S  their time limit in seconds (default 150)
# Run after 06_park.sh has parked parts/gguf.part-00 and -01; this command carries parts/gguf.part-02 (parts/wheels
# parked by 06_park.sh). On your own GPU: PEAGLE_GGUF=<the .gguf> OUT=out bash lab/gpu/09_engine_tests.sh
set -uxo pipefail
export PEAGLE_GGUF=${PEAGLE_GGUF:-/tmp/pk/SmolLM2-135M-Instruct.Q4_1.gguf} PEAGLE_CACHE=${PEAGLE_CACHE:-/tmp/pk/cache} PYTHONPATH=. PYTHONUNBUFFERED=1
bash lab/gpu/install_wheels.sh
bash lab/gpu/join_gguf.sh || exit 1
python -c "from peagle_lab.assets import resolve_target; print(resolve_target(None))" 2>&1 | tail -n 1
PEAGLE_TEST_DEVICE=cuda timeout ${TESTS_S:-150} python -m pytest -q -p no:cacheprovider --durations=8 \
  ${TESTS:-tests/test_teaching.py tests/test_batched.py} > "$OUT/gpu_engine_tests.log" 2>&1
tail -n 20 "$OUT/gpu_engine_tests.log"
echo "done at ${SECONDS} s"
