"""The drafter-forward GPU benchmark runs end to end at tiny size on CPU, and its built-in check holds:
slot 0 of the parallel pass and the first sequential pass give the single pass's logits."""
import json

from helpers import load_benchmark


def test_tiny_run_writes_rows_and_checks_hold(tmp_path):
    mod = load_benchmark("bench_drafter_forward.py")
    out = tmp_path / "tiny.json"
    mod.main(["--tiny", "--json", str(out)])
    r = json.loads(out.read_text())
    assert {"command", "date", "machine", "rows", "drafter"} <= set(r)
    assert [(x["B"], x["K"]) for x in r["rows"]] == [(1, 2), (1, 3), (2, 2), (2, 3)]
    for x in r["rows"]:
        assert x["single_ms"] > 0 and x["parallel_ms"] > 0 and x["sequential_ms"] > 0
        c = x["check"]
        assert c["parallel_slot0_max_abs_diff"] <= 1e-5 * max(1.0, c["logit_scale"]), c
        assert c["sequential_pass1_max_abs_diff"] <= 1e-5 * max(1.0, c["logit_scale"]), c


def test_cudagraph_mode_needs_a_gpu(tmp_path):
    import pytest
    import torch

    if torch.cuda.is_available():
        pytest.skip("this checks the CPU refusal")
    mod = load_benchmark("bench_drafter_forward.py")
    with pytest.raises(SystemExit, match="cudagraph needs a CUDA GPU"):
        mod.main(["--tiny", "--compile", "cudagraph", "--json", str(tmp_path / "x.json")])
