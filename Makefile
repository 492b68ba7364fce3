# Thin wrapper: every target calls pip, pytest or a Python module inside .venv.
PY := .venv/bin/python
NBMAKE_TIMEOUT ?= 1800
PYTEST_ARGS ?=

.PHONY: setup test test-fast tour lab clean

setup:
	bash scripts/setup_cpu.sh

# Unit tests (one real vLLM server and the browser included; <= 10 minutes on a 2-core CPU), then the tests marked
# slow (three more vLLM starts, a fresh-venv install, torch.compile, torchrun, the widest K sweeps), the library's
# docstring examples (seconds; __main__.py is left out: importing it runs the CLI), then every notebook at its small
# CI settings (PEAGLE_SMOKE=1) under nbmake. lab/ has its own tests (pytest lab/tests), outside this target.
# `|| [ $$? = 5 ]`: a PYTEST_ARGS selection that leaves one of the two steps empty is not a failure.
test: setup
	$(PY) -m pytest -q -m "not slow" $(PYTEST_ARGS) tests || [ $$? = 5 ]
	$(PY) -m pytest -q -m slow $(PYTEST_ARGS) tests || [ $$? = 5 ]
	$(PY) -m pytest -q -p no:cacheprovider --doctest-modules peagle_lab --ignore=peagle_lab/__main__.py
	PEAGLE_SMOKE=1 PEAGLE_SOLUTIONS=1 $(PY) -m pytest -q -p no:cacheprovider --nbmake --nbmake-timeout=$(NBMAKE_TIMEOUT) --nbmake-kernel=peagle-lab notebooks

# The development loop: the unit tests without real vLLM servers, the browser, the tests of 4 s or more, the
# fresh-venv install, torch.compile and torchrun runs (markers vllm, browser, heavy, slow), in under 4 minutes on a
# 2-core CPU. `make test` (CI) runs them all.
test-fast:
	@test -x $(PY) || $(MAKE) setup
	$(PY) -m pytest -q -p no:cacheprovider -m "not vllm and not browser and not heavy and not slow" \
		$(PYTEST_ARGS) tests

# Executes the notebooks in order (CI settings unless PEAGLE_SMOKE=0) into build/ as .ipynb + HTML.
tour: setup
	PEAGLE_SMOKE=$${PEAGLE_SMOKE:-1} $(PY) -m peagle_lab.tour notebooks build

# As root (containers, cloud shells) Jupyter refuses to start without --allow-root.
lab: setup
	$(PY) -m jupyter lab $$([ "$$(id -u)" = 0 ] && echo --allow-root) notebooks

clean:
	rm -rf build .pytest_cache
