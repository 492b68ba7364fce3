"""The decode engines, one loop in three builds (nano-vllm's ``engine/`` folder, vLLM's names).

* :mod:`~peagle_lab.engines.frame`       -- what they share: result types, ``check_request``, the greedy
  accept rule (``accepted_prefix``), ``finish`` and the ``StepTimer``;
* :mod:`~peagle_lab.engines.drafting`    -- EAGLE-3 and P-EAGLE drafting, side by side;
* :mod:`~peagle_lab.engines.verify`      -- lossless verification (greedy and rejection sampling);
* :mod:`~peagle_lab.engines.teaching`    -- ``generate``: one request, the readable loop;
* :mod:`~peagle_lab.engines.batch_cache` + :mod:`~peagle_lab.engines.batched` -- ``generate_batch``:
  B requests, each accepting its own number of drafts, on vLLM's ragged layout;
* :mod:`~peagle_lab.engines.fast`        -- ``generate_fast``: static caches and CUDA graphs.

Each engine prefills, then calls ``step()`` (draft -> verify -> accept) until done; AR is K = 0.
"""
