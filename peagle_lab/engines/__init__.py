"""The decode engines, one loop in three builds (nano-vllm's ``engine/`` folder, vLLM's names).

* :mod:`~peagle_lab.engines.request`     -- what they share: the :class:`Request` state every engine keeps
  (tokens, acceptance, steps, budget, EOS), the result types and ``check_request``;
* :mod:`~peagle_lab.engines.timing`      -- the ``StepTimer`` that splits a generation's time by phase;
* :mod:`~peagle_lab.engines.drafting`    -- EAGLE-3 and P-EAGLE drafting, side by side;
* :mod:`~peagle_lab.engines.verify`      -- lossless verification (greedy and rejection sampling) and the
  greedy accept rule ``accepted_prefix``;
* :mod:`~peagle_lab.engines.teaching`    -- ``generate``: one request, the readable loop;
* :mod:`~peagle_lab.engines.batch_cache` + :mod:`~peagle_lab.engines.batched` -- ``generate_batch``:
  B requests, each accepting its own number of drafts, on vLLM's ragged layout;
* :mod:`~peagle_lab.engines.fast`        -- ``generate_fast``: static caches and CUDA graphs;
* :mod:`~peagle_lab.engines.protocol`    -- ``make_engine``: any of them behind one ``generate``, for
  ``bench`` and ``eval``.

Each engine prefills, then calls ``step()`` (draft -> verify -> accept) until done; AR is K = 0.
A step ends with the target's own token (``next_token``): its correction of the first rejected draft,
or, when all K drafts were accepted, one token more -- what vLLM calls the bonus token.
"""
