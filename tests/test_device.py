"""``device="auto"`` is decided in one place (peagle_lab.device), the command line defaults to it, and
``regenerate --dtype bfloat16`` writes the same kind of shards as float32."""
import json

import pytest
import torch

from peagle_lab.cli import build_parser, main
from peagle_lab.device import resolve_device
from peagle_lab.target import Target
from peagle_lab.train.data import load_samples

HERE = "cuda" if torch.cuda.is_available() else "cpu"


def test_resolve_device():
    assert resolve_device("auto") == resolve_device(None) == resolve_device() == HERE
    assert resolve_device("cpu") == resolve_device(torch.device("cpu")) == "cpu"
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit, match="--device cpu"):
            resolve_device("cuda")


def test_bench_keeps_its_names():
    """Notebooks import resolve_device and DTYPES from peagle_lab.bench: the same objects."""
    from peagle_lab import bench, device

    assert bench.resolve_device is device.resolve_device and bench.DTYPES is device.DTYPES


@pytest.mark.parametrize("command", [["bench"], ["eval", "x"], ["regenerate", "--out", "x"],
                                     ["train", "--data", "x", "--out", "y"]])
def test_cli_device_defaults_to_auto(command):
    assert build_parser().parse_args(command).device == "auto"


def test_target_load_auto_and_the_batch_engine_there(target):
    """Target.load(device="auto") lands where resolve_device says; the engines, batched too, run where the target is."""
    from peagle_lab.engines.batched import generate_batch

    auto = Target.load(device="auto")
    assert auto.device.type == HERE
    prompts = [target.chat_ids("Hi"), target.chat_ids("Name a colour.")]
    alone = [target.generate(ids, 3).tokens for ids in prompts]
    assert [auto.generate(ids, 3).tokens for ids in prompts] == alone
    assert [r.tokens for r in generate_batch(auto, prompts, method="ar", max_new_tokens=3).results] == alone


def test_regenerate_bfloat16_writes_valid_shards(target, tmp_path, capsys):
    """`regenerate --dtype bfloat16` (a GPU's ~2x faster choice; emulated on this CPU): shards that load and
    hold each chat-templated prompt followed by a reply of at most --max-new-tokens real token ids."""
    from peagle_lab.prompts import load_prompts

    argv = ["regenerate", "--prompts", "mt-bench", "--num-prompts", "3", "--max-new-tokens", "4", "--batch-size", "2",
            "--shard-size", "2", "--dtype", "bfloat16", "--out", str(tmp_path)]
    assert build_parser().parse_args(argv[:-2] + ["--out", "x"]).dtype == "bfloat16"
    assert build_parser().parse_args(["regenerate", "--out", "x"]).dtype == "float32"
    assert main(argv) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert json.loads(last) == {"out": str(tmp_path), "shards": 2, "prompts": 3}
    assert sorted(p.name for p in tmp_path.glob("shard-*.pt")) == ["shard-00000.pt", "shard-00001.pt"]
    raw = torch.load(tmp_path / "shard-00000.pt", weights_only=True)
    assert all(s["ids"].dtype == torch.int32 for s in raw)
    samples = load_samples(tmp_path)
    assert len(samples) == 3
    for text, s in zip(load_prompts("mt-bench", 3), samples):
        assert s.ids[: s.prompt_len].tolist() == target.chat_ids(text)
        reply = s.ids[s.prompt_len:]
        assert 1 <= reply.numel() <= 4 and int(reply.min()) >= 0 and int(reply.max()) < target.vocab_size
    with pytest.raises(SystemExit):
        build_parser().parse_args(["regenerate", "--out", "x", "--dtype", "float64"])


def test_sdpa_without_cudnn():
    """On CUDA the context turns cuDNN's SDPA off and keeps flash / memory-efficient (they plan nothing per shape),
    then restores it; elsewhere, or with skip=False, it changes nothing."""
    from peagle_lab.device import sdpa_without_cudnn

    before = torch.backends.cuda.cudnn_sdp_enabled()
    for device, skip in (("cpu", True), (torch.device("cpu"), True), ("cuda", False)):
        with sdpa_without_cudnn(device, skip):
            assert torch.backends.cuda.cudnn_sdp_enabled() == before
    if torch.cuda.is_available():
        with sdpa_without_cudnn("cuda"):
            assert not torch.backends.cuda.cudnn_sdp_enabled()
            assert torch.backends.cuda.flash_sdp_enabled() and torch.backends.cuda.mem_efficient_sdp_enabled()
        assert torch.backends.cuda.cudnn_sdp_enabled() == before


def test_half_dtype_follows_the_gpu_and_can_be_forced(monkeypatch):
    """fp16 below compute capability 8.0 (a T4), bf16 above; PEAGLE_HALF_DTYPE forces the T4's path on any GPU, and
    vLLM serving on CUDA takes the same dtype (a T4 cannot serve bf16)."""
    from peagle_lab.device import half_dtype
    from peagle_lab.serving.bench import serving_defaults

    assert (half_dtype((7, 5)), half_dtype((8, 0)), half_dtype((9, 0))) == ("float16", "bfloat16", "bfloat16")
    monkeypatch.setenv("PEAGLE_HALF_DTYPE", "float16")
    assert half_dtype() == "float16" and serving_defaults(True, ["ar", "peagle"])["dtype"] == "float16"
    assert half_dtype((9, 0)) == "bfloat16", "an explicit capability is answered as asked"
    monkeypatch.setenv("PEAGLE_HALF_DTYPE", "fp16")
    with pytest.raises(ValueError, match="set it to bfloat16 or float16"):
        half_dtype()
    monkeypatch.delenv("PEAGLE_HALF_DTYPE")
    if not torch.cuda.is_available():
        assert half_dtype() == "bfloat16" and serving_defaults(True, ["ar"])["dtype"] == "bfloat16"
