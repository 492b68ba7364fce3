"""peagle-lab: learn, train and serve P-EAGLE (parallel EAGLE speculative decoding).

Stages and their modules (each notebook names the modules it uses):

* 01 sequential EAGLE -- :mod:`target`, :mod:`drafter`, :mod:`engines.drafting`, :mod:`engines.verify`,
  :mod:`engines.teaching`, :mod:`stats`, :mod:`viz`
* 02 parallel drafting (P-EAGLE) -- :mod:`engines.drafting` (``draft_parallel``), :mod:`drafter`
"""
__version__ = "0.1.0"
