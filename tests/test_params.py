import pytest

from peagle_lab.params import notebook_params


def test_defaults_smoke_and_env(monkeypatch):
    defaults = dict(num_prompts=20, k=[3, 5, 7], temperature=0.0, plot=True, prompts="mt-bench")
    monkeypatch.delenv("PEAGLE_SMOKE", raising=False)
    assert notebook_params(defaults, smoke=dict(num_prompts=1)) == defaults
    monkeypatch.setenv("PEAGLE_SMOKE", "1")
    assert notebook_params(defaults, smoke=dict(num_prompts=1))["num_prompts"] == 1
    monkeypatch.setenv("PEAGLE_NUM_PROMPTS", "4")
    monkeypatch.setenv("PEAGLE_K", "2,4")
    monkeypatch.setenv("PEAGLE_TEMPERATURE", "0.7")
    monkeypatch.setenv("PEAGLE_PLOT", "no")
    p = notebook_params(defaults, smoke=dict(num_prompts=1))
    assert p == dict(num_prompts=4, k=[2, 4], temperature=0.7, plot=False, prompts="mt-bench")


def test_bad_env_value_names_the_fix(monkeypatch):
    monkeypatch.setenv("PEAGLE_NUM_PROMPTS", "many")
    with pytest.raises(ValueError, match="PEAGLE_NUM_PROMPTS='many' is not a valid int"):
        notebook_params(dict(num_prompts=3))


def test_smoke_key_without_default_is_refused(monkeypatch):
    monkeypatch.setenv("PEAGLE_SMOKE", "1")
    with pytest.raises(KeyError, match="no default"):
        notebook_params(dict(a=1), smoke=dict(b=2))
