"""Shared test builders: tiny targets, random drafters and learnable training samples made in code, and the
benchmark scripts loaded as modules."""
import importlib.util
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, LlamaConfig

from peagle_lab.drafter import DrafterConfig, init_drafter
from peagle_lab.target import Target
from peagle_lab.train.data import Sample


def random_drafter(target, *, parallel: bool, num_layers: int = 1, draft_vocab_size: int | None = None,
                   seed: int = 0, trained_depth: int | None = None, scale: float | None = None):
    cfg = DrafterConfig.for_target(target, num_layers=num_layers, parallel_drafting=parallel,
                                   draft_vocab_size=draft_vocab_size, trained_depth=trained_depth)
    d = init_drafter(cfg, target, seed=seed)
    if draft_vocab_size and draft_vocab_size < target.vocab_size:
        g = torch.Generator().manual_seed(seed)
        d.set_draft_vocab(torch.randperm(target.vocab_size, generator=g)[:draft_vocab_size])
    if scale is not None:  # peakier random distributions for statistical tests
        with torch.no_grad():
            d.lm_head.weight.mul_(scale)
    return d.to(target.device).eval()           # the target's device (PEAGLE_TEST_DEVICE=cuda runs on a GPU)


def tiny_target(vocab: int = 8, seed: int = 0, logit_scale: float = 1.0, head_dim: int = 8, layers: int = 5,
                context: int = 256) -> Target:
    """A random 32-wide Llama; ``context`` is its max_position_embeddings (the engines refuse longer requests)."""
    heads = 32 // head_dim                       # hidden 32; compiled flex attention needs head_dim >= 16
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=max(1, heads // 2), head_dim=head_dim,
                      max_position_embeddings=context,
                      tie_word_embeddings=False, eos_token_id=None, bos_token_id=None, pad_token_id=None)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    with torch.no_grad():
        model.lm_head.weight.normal_(0, logit_scale)
        model.get_input_embeddings().weight.normal_(0, 1.0)
    return Target(model, tokenizer=None)


def learnable_samples(n: int = 12, vocab: int = 50, seed: int = 0) -> list[Sample]:
    """``n`` 30-token samples (prompt 5) of a repetitive "language" a drafter learns quickly: runs of an
    arithmetic sequence mod ``vocab``."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        start, step = int(torch.randint(0, vocab, (1,), generator=g)), 1 + i % 3
        ids = (start + step * torch.arange(30)) % vocab
        out.append(Sample(ids, prompt_len=5))
    return out


def load_benchmark(relpath: str):
    """A script under benchmarks/ (``"make_results.py"``, ``"gpu/fast_engine_bench.py"``), imported as a module."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / relpath
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
