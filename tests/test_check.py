"""`peagle-lab check` names each fault of a broken drafter and passes the shipped ones."""
import json
import shutil

import pytest
from safetensors.torch import load_file, save_file

from peagle_lab.check import check_drafter
from peagle_lab.drafters_registry import shipped


@pytest.fixture()
def peagle_copy(tmp_path):
    dst = tmp_path / "d"
    shutil.copytree(shipped()["peagle-smollm2"], dst)
    return dst


def test_shipped_drafter_passes_with_a_probe(target):
    report = check_drafter(str(shipped()["peagle-smollm2"]), target, probe_prompts=1, probe_tokens=16)
    assert report["problems"] == [] and report["probe"]["k"] == 8
    assert len(report["probe"]["acceptance_per_position"]) == 8


def _edit_config(path, **changes):
    cfg = json.loads((path / "config.json").read_text())
    cfg.update(changes)
    (path / "config.json").write_text(json.dumps(cfg))


def test_wrong_taps_are_named(target, peagle_copy):
    _edit_config(peagle_copy, eagle_aux_hidden_state_layer_ids=[1, 14, 26])
    report = check_drafter(str(peagle_copy), target)
    assert any("trained on target layers [1, 14, 26]" in p for p in report["problems"])


def test_missing_mask_hidden_is_named(target, peagle_copy):
    w = load_file(str(peagle_copy / "model.safetensors"))
    del w["mask_hidden"]
    save_file(w, str(peagle_copy / "model.safetensors"))
    assert "no mask_hidden" in check_drafter(str(peagle_copy), target)["problems"][0]


def test_wrong_vocab_and_missing_d2t_are_named(target, peagle_copy):
    _edit_config(peagle_copy, vocab_size=32000)
    assert any("32000" in p for p in check_drafter(str(peagle_copy), target)["problems"])
    _edit_config(peagle_copy, vocab_size=49152)
    w = load_file(str(peagle_copy / "model.safetensors"))
    del w["d2t"]
    save_file(w, str(peagle_copy / "model.safetensors"))
    assert "no d2t mapping" in check_drafter(str(peagle_copy), target)["problems"][0]


def test_depth_beyond_training_is_named(target, peagle_copy):
    assert any("K=9 exceeds" in p for p in check_drafter(str(peagle_copy), target, k=9)["problems"])
