"""The speed-up calculator's formula against values worked out by hand."""
import pytest

from peagle_lab.speedup import crossover_k, estimate, step_ms, tokens_per_s


def test_step_time_counts_k_passes_or_one():
    assert step_ms("sequential", 5, 0.1, 3.0) == pytest.approx(3.5)      # 5 x 0.1 + 3.0
    assert step_ms("parallel", 5, 0.3, 3.0) == pytest.approx(3.3)        # 1 x 0.3 + 3.0
    with pytest.raises(ValueError):
        step_ms("tree", 5, 0.1, 3.0)
    with pytest.raises(ValueError):
        step_ms("parallel", 0, 0.1, 3.0)


def test_tokens_per_s_is_al_over_step_time():
    assert tokens_per_s(3.0, 3.5) == pytest.approx(857.142857, rel=1e-6)   # 3 tokens / 3.5 ms
    assert tokens_per_s(1.0, 2.0) == pytest.approx(500.0)


def test_crossover_with_equal_acceptance_is_the_pass_cost_ratio():
    # parallel wins once K sequential passes cost at least one parallel pass: K x 0.1 >= 0.45 -> K = 5
    assert crossover_k(seq_pass_ms=0.1, par_pass_ms=0.45, verify_ms=3.0) == 5
    assert crossover_k(seq_pass_ms=0.2, par_pass_ms=0.1, verify_ms=3.0) == 1


def test_crossover_with_lower_parallel_acceptance():
    # parallel: 2.7 / (0.4 + 2.0) = 1.125 tok/ms; sequential: 3.0 / (0.1 K + 2.0) <= 1.125 -> K >= 6.67 -> 7
    assert crossover_k(seq_pass_ms=0.1, par_pass_ms=0.4, verify_ms=2.0, al_seq=3.0, al_par=2.7) == 7
    # a parallel pass dearer than 16 sequential ones never wins up to K = 16
    assert crossover_k(seq_pass_ms=0.1, par_pass_ms=5.0, verify_ms=2.0) is None


def test_estimate_puts_plain_decoding_beside_both():
    e = estimate(k=4, al_seq=2.0, al_par=2.0, seq_pass_ms=0.5, par_pass_ms=1.0, verify_ms=4.0, decode_ms=4.0)
    assert e.ar == pytest.approx(250.0)                      # 1 token / 4 ms
    assert e.sequential == pytest.approx(2000 / 6.0)         # 2 tokens / (4 x 0.5 + 4) ms
    assert e.parallel == pytest.approx(400.0)                # 2 tokens / (1 + 4) ms
    assert e.crossover == 2                                  # 2 x 0.5 >= 1.0
    assert "parallel drafting wins from K = 2" in e.summary()


def test_calculator_widget_recomputes_on_change():
    pytest.importorskip("ipywidgets")
    from peagle_lab.speedup import calculator
    box = calculator(k=4, al_seq=2.0, al_par=2.0, seq_pass_ms=0.5, par_pass_ms=1.0, verify_ms=4.0, decode_ms=4.0)
    assert "parallel 400 tok/s" in box.result.value
    box.controls["k"].value = 1
    assert "parallel 400 tok/s" in box.result.value and "sequential 444 tok/s" in box.result.value
