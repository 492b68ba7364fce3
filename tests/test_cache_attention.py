"""Oracles for the fast engine's Triton cache attention (peagle_lab.kernels.cache_attention).

* the two kernels equal SDPA with the same mask (the reference), for GQA row layouts, decode and
  verify row counts, caches that are not a multiple of the 64-slot block, and stale slots past every
  position filled with huge values (they must not leak in);
* StaticTarget with attention="triton" equals transformers' logits through prefill, decode, verify and
  rollback, and generate_fast with it (the drafters' layers attending through the kernel too) equals
  plain AR token for token, with the teaching engine's acceptance (EAGLE-3 and P-EAGLE);
* on CUDA: the compiled kernels, bfloat16 against the reference, and the shipped drafters' lossless
  greedy run inside captured graphs.

On CPU the kernels run in Triton's interpreter (float32 exactly: float32 dots with no TF32 on a GPU
either). Tolerances: float32 outputs 1e-5 (measured ~3e-7); float16 3e-3 (p is rounded to float16
before the P @ V product, as flash kernels do); bfloat16 on CUDA 2e-2.
"""
import pytest
import torch

from helpers import random_drafter, tiny_target
from peagle_lab.engines.teaching import generate
from peagle_lab.engines.fast import FastConfig, StaticTarget, generate_fast
from peagle_lab.kernels.cache_attention import (MAX_ROWS, attend_cache, cache_attention, cache_attention_torch,
                                                 cache_attention_triton)

pytest.importorskip("triton")
DEV = torch.device("cuda" if torch.cuda.is_available() else "cpu")
cuda_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="the compiled kernels need a CUDA device")


def _case(G, rep, T, S, hd, start, dtype, device=DEV, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(*shape, generator=g).to(device=device, dtype=dtype)
               for shape in ((G, rep * T, hd), (G, S, hd), (G, S, hd)))
    k[:, start + T:], v[:, start + T:] = 3e3, -3e3          # stale slots: must stay masked
    return q, k, v, torch.arange(start, start + T, device=device)


# (G kv heads, rep query heads per kv head, T tokens, S slots, head dim, first position)
SHAPES = [(3, 3, 1, 832, 64, 40),        # SmolLM2-135M's decode: 3 rows per head, a cache of 832
          (3, 3, 8, 832, 64, 700),       # its verify of K+1 = 8 tokens late in the cache
          (2, 1, 4, 100, 32, 0),         # no GQA, a prompt at slot 0, S not a multiple of 64
          (1, 4, 3, 130, 16, 126),       # the last live slot is the cache's last
          (2, 2, 5, 64, 16, 59)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float16, 3e-3)])
def test_kernel_equals_sdpa(shape, dtype, tol):
    q, k, v, pos = _case(*shape, dtype=dtype)
    got = cache_attention_triton(q, k, v, pos)
    ref = cache_attention_torch(q, k, v, pos)
    assert got.dtype == q.dtype and got.shape == q.shape
    assert (got.float() - ref.float()).abs().max() <= tol


def test_op_is_the_kernel_and_traceable():
    """The torch op returns what the kernels return, and its fake implementation gives the shape."""
    q, k, v, pos = _case(3, 3, 2, 128, 16, 20, torch.float32)
    assert torch.equal(torch.ops.peagle_lab.cache_attention(q, k, v, pos), cache_attention_triton(q, k, v, pos))
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode() as mode:
        fq, fk, fv, fp = (mode.from_tensor(t) for t in (q, k, v, pos))
        assert cache_attention(fq, fk, fv, fp).shape == q.shape


def test_prompt_pass_goes_to_sdpa():
    """A step's rows run the kernel; a prompt's hundreds of rows (more than one program holds) go to SDPA,
    through the same entry point, and the kernel refuses them by name."""
    q, k, v, pos = _case(2, 3, 50, 128, 16, 0, torch.float32)               # 150 rows > MAX_ROWS
    assert q.shape[1] > MAX_ROWS
    assert torch.equal(attend_cache(q, k, v, pos), cache_attention_torch(q, k, v, pos))
    with pytest.raises(ValueError, match="attend_cache"):
        cache_attention_triton(q, k, v, pos)
    q, k, v, pos = _case(2, 3, 8, 128, 16, 40, torch.float32)
    assert torch.equal(attend_cache(q, k, v, pos), cache_attention_triton(q, k, v, pos))


def test_clear_errors():
    q, k, v, pos = _case(1, 1, 1, 64, 16, 3, torch.float32, device="cpu")
    with pytest.raises(ValueError, match="power-of-two head dim"):
        cache_attention_triton(q[..., :12], k[..., :12], v[..., :12], pos)
    with pytest.raises(ValueError, match="bfloat16"):
        cache_attention_triton(q.bfloat16(), k.bfloat16(), v.bfloat16(), pos)
    with pytest.raises(ValueError, match="multiple of the 2 positions"):
        cache_attention_triton(torch.zeros(1, 3, 16), k, v, torch.arange(2))
    with pytest.raises(ValueError, match="attention='bogus'"):
        generate_fast(tiny_target(vocab=20, head_dim=16), [1, 2], method="ar", max_new_tokens=2, max_len=64,
                      attention="bogus")


def test_auto_attention_picks_triton_on_cuda_only(monkeypatch):
    """attention="auto" (the default everywhere): the kernel on a CUDA GPU of compute capability >= 8.0 where every
    head dim fits it; SDPA on a CPU (the kernel would run in Triton's interpreter), on older GPUs (a T4) and for
    head dims the kernel refuses; explicit choices stay."""
    from peagle_lab.engines.fast.llama import resolve_attention
    assert resolve_attention("auto", "cpu", (64,)) == "sdpa"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))      # an H100 / H200
    assert resolve_attention("auto", "cuda", (64, 32)) == "triton"
    assert resolve_attention("auto", torch.device("cuda", 0), (64, 12)) == "sdpa"
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))      # a T4
    assert resolve_attention("auto", "cuda", (64,)) == "sdpa"
    monkeypatch.undo()
    assert resolve_attention("sdpa", "cuda", (64,)) == "sdpa" and resolve_attention("triton", "cpu") == "triton"
    with pytest.raises(ValueError, match="'auto'"):
        resolve_attention("flash", "cpu")
    tiny = tiny_target(vocab=20, head_dim=16)
    tiny.model.to(DEV)                                           # the engine resolves "auto" on the target's device
    out = generate_fast(tiny, [1, 2, 3], method="ar", max_new_tokens=4, max_len=64, stop_at_eos=False)
    from peagle_lab.engines.fast import engine as fe
    assert {key[-1].attention for key in fe._ENGINES[tiny]} == {"sdpa" if DEV.type == "cpu" else "triton"}
    assert out.tokens == generate(tiny, [1, 2, 3], method="ar", max_new_tokens=4, stop_at_eos=False).tokens


@cuda_only
def test_prompt_pass_skips_cudnn_sdpa():
    """The prompt's eager pass runs SDPA without cuDNN (a plan per new prompt length); steps keep every backend."""
    from peagle_lab.engines.fast.engine import prompt_sdpa
    with prompt_sdpa(torch.device("cuda")):
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert torch.backends.cuda.flash_sdp_enabled() and torch.backends.cuda.mem_efficient_sdp_enabled()
    with prompt_sdpa(torch.device("cpu")):
        pass


def test_imports_without_triton():
    """Without Triton (macOS, Windows, a CPU-only install) the fast engine and the bench still import and
    attention="auto" resolves to SDPA; only attention="triton" asks for Triton, by name."""
    import subprocess
    import sys
    code = ("import sys; sys.modules['triton'] = None; sys.modules['triton.language'] = None\n"
            "import peagle_lab.engines.fast, peagle_lab.bench\n"
            "from peagle_lab.engines.fast.llama import resolve_attention\n"
            "from peagle_lab.kernels.cache_attention import cache_attention_triton\n"
            "assert resolve_attention('auto', 'cuda', (64,)) == 'sdpa'\n"
            "import torch\n"
            "try:\n"
            "    kv = torch.zeros(1, 4, 16)\n"
            "    cache_attention_triton(torch.zeros(1, 1, 16), kv, kv, torch.zeros(1, dtype=torch.long))\n"
            "except RuntimeError as err:\n"
            "    assert 'pip install triton' in str(err), err\n"
            "else:\n"
            "    raise SystemExit('no error without Triton')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]


def test_kernels_compile_for_hopper():
    """Without a GPU: both kernels, in the form the GPU runs (the combine's loop bounded by the live blocks),
    compile ahead of time for an H100/H200 (sm_90) with the ptxas Triton ships, so a kernel edit tested only
    through the interpreter cannot break the CUDA path unseen."""
    try:
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource, compile as triton_compile
    except ImportError as err:                                      # an older Triton's layout
        pytest.skip(f"Triton's ahead-of-time compiler is not importable here: {err}")
    from peagle_lab.kernels.cache_attention import BLOCK_S, _kernels
    split, combine = _kernels(False)
    ptr = {"f": "*fp32", "h": "*bf16", "i": "*i64"}
    common = {"HD": 64, "BLOCK_R": 32, "BLOCK_S": BLOCK_S}
    cases = [(split, {"q_ptr": ptr["h"], "k_ptr": ptr["h"], "v_ptr": ptr["h"], "pos_ptr": ptr["i"], "o_ptr": ptr["f"],
                      "m_ptr": ptr["f"], "l_ptr": ptr["f"], "R": "i32", "T": "i32", "S": "i32", "scale": "fp32"},
              dict(common, IEEE=False)),
             (combine, {"o_ptr": ptr["f"], "m_ptr": ptr["f"], "l_ptr": ptr["f"], "pos_ptr": ptr["i"],
                        "out_ptr": ptr["h"], "R": "i32", "T": "i32"}, dict(common, NBLK=13, ALL_BLOCKS=False))]
    for fn, sig, consts in cases:
        sig = dict(sig, **{name: "constexpr" for name in consts})
        try:
            kernel = triton_compile(ASTSource(fn, sig, constexprs=consts), target=GPUTarget("cuda", 90, 32))
        except RuntimeError as err:
            if "ptxas" in str(err).lower():
                pytest.skip(f"no CUDA toolchain in this Triton install: {err}")
            raise
        assert ".entry" in kernel.asm["ptx"], fn
    assert "scf.for" in kernel.asm["ttir"]             # the combine loops over a runtime count (the live blocks)


@torch.inference_mode()
def test_static_target_triton_equals_transformers():
    tiny = tiny_target(vocab=50, head_dim=16)                 # 2 query heads on 1 KV head
    st = StaticTarget(tiny, 64, attention="triton")
    cache, pos = tiny.new_cache(), 0
    for chunk, back in (([1, 5, 9, 2, 7], 0), ([3], 0), ([4, 8, 1, 6], 2), ([6, 6], 0)):
        ids = torch.tensor(chunk)
        ref = tiny.forward(ids, cache)
        logits, aux = st.forward(ids, torch.arange(pos, pos + len(chunk)))
        assert (logits - ref.logits[0]).abs().max() <= 1e-5
        assert (aux - ref.aux[0]).abs().max() <= 1e-6 * ref.aux.abs().max()
        pos += len(chunk) - back
        if back:
            tiny.rollback(cache, pos)


def test_generate_fast_triton_equals_ar():
    """Random drafters (accept ~nothing) and the tiny model: every method equals AR, stats equal the teaching
    engine's."""
    tiny = tiny_target(vocab=50, head_dim=16)
    prompt = [1, 5, 9, 2, 7, 3]
    ref = generate(tiny, prompt, method="ar", max_new_tokens=16, stop_at_eos=False).tokens
    out = generate_fast(tiny, prompt, method="ar", max_new_tokens=16, stop_at_eos=False, max_len=64, attention="triton")
    assert out.tokens == ref
    for method, parallel, layers in (("eagle", False, 1), ("peagle", True, 2)):
        d = random_drafter(tiny, parallel=parallel, num_layers=layers, draft_vocab_size=20, seed=3)
        out = generate_fast(tiny, prompt, method=method, drafter=d, k=3, max_new_tokens=16, stop_at_eos=False,
                            max_len=64, attention="triton")
        assert out.tokens == ref, method
        teach = generate(tiny, prompt, method=method, drafter=d, k=3, max_new_tokens=16, stop_at_eos=False)
        assert out.acceptance.to_dict() == teach.acceptance.to_dict(), method
    from peagle_lab.engines.fast import engine as fe
    drafting = [e for key, e in fe._ENGINES[tiny].items() if key[-1].attention == "triton" and e.drafter is not None]
    # the drafters' layers too
    assert len(drafting) == 2 and all(e.dcache.attend == e.dcache._attend for e in drafting)


def test_long_prompt_mixes_sdpa_prefill_and_kernel_steps():
    """A prompt longer than MAX_ROWS / rep: its pass (target and drafter) goes to SDPA, the steps after it to the
    kernel, over the same caches; still AR token for token, with the teaching engine's acceptance."""
    tiny = tiny_target(vocab=50, head_dim=16)
    prompt = [(7 * i + 3) % 50 for i in range(80)]             # 2 rows per token: 160 rows > MAX_ROWS
    ref = generate(tiny, prompt, method="ar", max_new_tokens=12, stop_at_eos=False).tokens
    for method, parallel in (("eagle", False), ("peagle", True)):
        d = random_drafter(tiny, parallel=parallel, num_layers=1, draft_vocab_size=20, seed=5)
        out = generate_fast(tiny, prompt, method=method, drafter=d, k=3, max_new_tokens=12, stop_at_eos=False,
                            max_len=128, attention="triton")
        assert out.tokens == ref, method
        teach = generate(tiny, prompt, method=method, drafter=d, k=3, max_new_tokens=12, stop_at_eos=False)
        assert out.acceptance.to_dict() == teach.acceptance.to_dict(), method


@cuda_only
@pytest.mark.parametrize("shape", SHAPES[:2])
def test_compiled_kernel_bfloat16(shape):
    q, k, v, pos = _case(*shape, dtype=torch.bfloat16)
    diff = cache_attention_triton(q, k, v, pos).float() - cache_attention_torch(q, k, v, pos).float()
    assert diff.abs().max() <= 2e-2


@cuda_only
@pytest.mark.parametrize("method,k,compile", [("ar", 0, False), ("eagle", 3, False), ("peagle", 7, False),
                                              ("peagle", 7, True)])
def test_shipped_lossless_in_graphs(target, mtbench_ids, method, k, compile):
    """The SmolLM2 target (float32 on the test device) with the shipped drafters: triton attention inside
    captured graphs (and fused by torch.compile around the op) gives AR's tokens and the sdpa engine's
    acceptance."""
    from peagle_lab.checkpoint import load_drafter
    from peagle_lab.drafters_registry import shipped

    drafter = load_drafter(shipped()[f"{method}-smollm2"], target) if method != "ar" else None
    ref = generate(target, mtbench_ids[0], method="ar", max_new_tokens=48).tokens
    kw = dict(method=method, drafter=drafter, k=max(k, 1), max_new_tokens=48, max_len=512)
    tri = generate_fast(target, mtbench_ids[0], attention="triton", compile=compile, **kw)
    assert tri.stats["graphs"] is True, tri.stats["graph_note"]
    assert tri.tokens == ref
    if method != "ar":
        assert tri.acceptance.to_dict() == generate_fast(target, mtbench_ids[0], **kw).acceptance.to_dict()


def test_bench_passes_attention_through(target, monkeypatch):
    """`bench --engine fast --attention triton`: every fast generation gets it and the settings say so; with the
    teaching engine or an unknown name it is refused, naming the fix; the pair tool names the variant."""
    from peagle_lab import bench
    from peagle_lab.bench import BenchSpec
    from peagle_lab.engines import protocol

    seen = []

    def recording(target, ids, *, config, **kw):
        seen.append(config.attention)
        return generate_fast(target, ids, config=config, **kw)

    monkeypatch.setattr(protocol, "generate_fast", recording)      # where the bench's engines are called
    out = bench.run_bench(BenchSpec(methods=["ar"], ks=[2], prompts="mt-bench", num_prompts=1, max_new_tokens=2,
                                    engine="fast"),
                          FastConfig(attention="triton"),
                          target=target, progress=False)
    assert seen and set(seen) == {"triton"} and out["settings"]["attention"] == "triton"
    assert out["results"][0]["tokens_per_s"] > 0
    spec = BenchSpec(methods=["ar"], ks=[2], prompts="mt-bench", num_prompts=1, max_new_tokens=2, engine="teaching")
    with pytest.raises(ValueError, match="--engine fast"):
        bench.run_bench(spec, FastConfig(attention="triton"), target=target, progress=False)
    with pytest.raises(ValueError, match="choose 'auto'"):
        FastConfig(attention="flash")

    from helpers import load_benchmark
    feb = load_benchmark("gpu/fast_engine_bench.py")
    # prompt graphs are on by default on CUDA (captured steps), off on the CPU
    assert feb._mode(out["settings"]) == ("plain+triton" if target.device.type == "cpu" else "plain+triton+pgraph")
    assert feb._mode({"compile": True, "attention": "triton"}) == "default+triton"
    assert feb._mode({"compile": False, "attention": "sdpa"}) == "plain"
    assert feb._mode({"compile": False, "attention": "triton", "cudnn_sdpa": False}) == "plain+triton+nocudnn"
