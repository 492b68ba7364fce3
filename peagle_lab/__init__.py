"""peagle-lab: learn, train and serve P-EAGLE (parallel EAGLE speculative decoding).

Stages and their modules (each notebook names the modules it uses):

* 01 sequential EAGLE -- :mod:`target`, :mod:`drafter`, :mod:`drafting`, :mod:`verify`,
  :mod:`engine`, :mod:`stats`, :mod:`viz`
* 02 parallel drafting (P-EAGLE) -- :mod:`drafting` (``draft_parallel``), :mod:`drafter`
"""
__version__ = "0.1.0"
