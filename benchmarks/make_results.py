"""Generate benchmarks/RESULTS.md from the raw JSON in benchmarks/results/ (never edit RESULTS.md by hand)."""
from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).parent


def _run_header(path: Path, r: dict, machine_tail: str, prompts_tail: str) -> list[str]:
    """Title, date/machine, command and prompt settings of one benchmark run."""
    s = r["settings"]
    return [f"## `{path.name}`", "",
            f"- date: {r['date']}; machine: {r['machine']} ({r.get('info', {}).get('device', {}).get('cpu_count', '?')} CPUs"
            + machine_tail,
            f"- command: `{r.get('command', '?')}`",
            f"- prompts: {s['prompts']}, {'spread over the set,' if s.get('spread') else 'first'} {s['num_prompts']}, max_new_tokens {s['max_new_tokens']}, "
            f"temperature {s['temperature']}" + prompts_tail]


def batched_bench_section(path: Path, r: dict) -> list[str]:
    """A `peagle-lab bench --batch-size 1,B` run: every row with its batch size; ratios at equal batch size."""
    s, info = r["settings"], r.get("info", {})
    lines = _run_header(path, r, f", torch {info.get('versions', {}).get('torch', '?')})",
                        f", batch sizes {s.get('batch_size')}; tokens/s = all requests' tokens / wall time") + [
             "",
             "| method | K | batch | tokens/s | x AR (same batch) | x batch 1 | AL | acceptance per position | identical to AR |",
             "|---|---|---|---|---|---|---|---|---|"]
    res = r["results"]
    ar = {x["batch_size"]: x["tokens_per_s"] for x in res if x["method"] == "ar"}
    one = {(x["method"], x["k"]): x["tokens_per_s"] for x in res if x["batch_size"] == 1}
    for x in res:
        b = x["batch_size"]
        vs_ar = f"{x['tokens_per_s'] / ar[b]:.2f}" if b in ar else "-"
        vs_one = f"{x['tokens_per_s'] / one[(x['method'], x['k'])]:.2f}" if (x["method"], x["k"]) in one else "-"
        al = f"{x['acceptance_length']:.2f}" if x["acceptance_length"] else "-"
        pp = ", ".join(f"{a:.2f}" for a in x["acceptance_per_position"]) if x["acceptance_per_position"] else "-"
        lines.append(f"| {x['method']} | {x['k'] or '-'} | {b} | {x['tokens_per_s']:.1f} | {vs_ar} | {vs_one} | {al} | {pp} | "
                     f"{x['identical_to_ar']} |")
    lines.append("")
    for b in sorted({x["batch_size"] for x in res}):
        best = {}
        for x in res:
            if x["batch_size"] == b and x["method"] in ("eagle", "peagle"):
                if x["method"] not in best or x["tokens_per_s"] > best[x["method"]]["tokens_per_s"]:
                    best[x["method"]] = x
        if len(best) == 2:
            e, p = best["eagle"], best["peagle"]
            lines.append(f"- batch {b}: best P-EAGLE (K={p['k']}) / best EAGLE (K={e['k']}): "
                         f"**{p['tokens_per_s'] / e['tokens_per_s']:.2f}x**"
                         + (f"; best P-EAGLE / AR: {p['tokens_per_s'] / ar[b]:.2f}x" if b in ar else ""))
    return lines + ([""] + [r["reading"]] if r.get("reading") else []) + [""]


def bench_section(path: Path, r: dict) -> list[str]:
    s = r["settings"]
    if any(x.get("batch_size", 1) > 1 for x in r["results"]):
        return batched_bench_section(path, r)
    lines = [f"## `{path.name}`", "",
             f"- date: {r['date']}; machine: {r['machine']} ({r.get('info', {}).get('device', {}).get('cpu_count', '?')} CPUs, "
             f"torch {r.get('info', {}).get('versions', {}).get('torch', '?')})",
             f"- command: `{r.get('command', '?')}`",
             f"- prompts: {s['prompts']}, {'spread over the set,' if s.get('spread') else 'first'} {s['num_prompts']}, max_new_tokens {s['max_new_tokens']}, temperature {s['temperature']}", "",
             "| method | K | tokens/s | x AR | AL | acceptance per position | identical to AR |",
             "|---|---|---|---|---|---|---|"]
    ar = next((x["tokens_per_s"] for x in r["results"] if x["method"] == "ar"), None)
    for x in r["results"]:
        ratio = f"{x['tokens_per_s'] / ar:.2f}" if ar else "-"
        al = f"{x['acceptance_length']:.2f}" if x["acceptance_length"] else "-"
        pp = ", ".join(f"{a:.2f}" for a in x["acceptance_per_position"]) if x["acceptance_per_position"] else "-"
        lines.append(f"| {x['method']} | {x['k'] or '-'} | {x['tokens_per_s']:.1f} | {ratio} | {al} | {pp} | {x['identical_to_ar']} |")
    best = {}
    for x in r["results"]:
        if x["method"] in ("eagle", "peagle"):
            if x["method"] not in best or x["tokens_per_s"] > best[x["method"]]["tokens_per_s"]:
                best[x["method"]] = x
    if len(best) == 2:
        e, p = best["eagle"], best["peagle"]
        hf = next((x["tokens_per_s"] for x in r["results"] if x["method"] == "hf"), None)
        lines += ["", f"Best P-EAGLE (K={p['k']}) / best EAGLE (K={e['k']}): **{p['tokens_per_s'] / e['tokens_per_s']:.2f}x**"
                  + (f"; best P-EAGLE / transformers generate: **{p['tokens_per_s'] / hf:.2f}x**" if hf else "") + "."]
        split = p.get("time_split_s")
        if split:
            total = sum(split.values())
            lines.append("P-EAGLE K=%d time split: " % p["k"] + ", ".join(f"{k} {v / total:.0%}" for k, v in split.items()) + ".")
    return lines + [""]


def fused_section(path: Path, r: dict) -> list[str]:
    """`23_fused_engine.sh`: each variant of the fast engine (compiled steps, the Triton cache attention, SDPA without
    cuDNN) against the plain engine of the same call, a row pair per (variant, method, K), then per variant the best
    P-EAGLE against the best EAGLE-3 and AR."""
    if "pairs" not in r:
        return bench_section(path, r)
    s, same = r["settings"], r.get("ar_plain_vs_compiled") or {}
    dtype = next((x.get("dtype") for x in r["results"] if x.get("dtype")), "?")
    lines = [f"## `{path.name}`", "", f"- date: {r['date']}; machine: {r['machine']}, torch {r['versions']['torch']}",
             f"- {r.get('what', '')}", f"- command: `{r['command']}`",
             f"- {s['prompts']}, {s['num_prompts']} prompts x {s['max_new_tokens']} tokens, T={s['temperature']}, "
             f"batch {s['batch_size']}, {dtype}; tokens/s counts the prompt's pass, decode tokens/s leaves it out", "",
             "| method (variant) | K | tokens/s plain | tokens/s variant | x | decode tokens/s | prompt ms | AL plain / variant "
             "| verify ms | draft ms | host ms | identical to AR (plain / variant) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in r["pairs"]:
        a, b = p["plain"], p["compiled"]
        if a is None or b is None:                     # a phase that crashed or timed out: no pair to show
            lines.append(f"| {p['method']} | {p['k'] or '-'} | {'missing' if a is None else round(a['tokens_per_s'])} | "
                         f"{'missing' if b is None else round(b['tokens_per_s'])} | - | - | - | - | - | - | - | - |")
            continue
        ms = {part: f"{a['step_split_ms'][part]:.3f} -> {b['step_split_ms'][part]:.3f}" for part in ("verify", "draft", "host")}
        x = f"{p['speedup']:.2f}" if p.get("speedup") else f"not comparable ({a['num_prompts']} vs {b['num_prompts']} prompts)"
        row = _fused_rows(r, p, b)
        dec = (f"{_f(row[0].get('decode_tokens_per_s'), '.0f')} -> {_f(row[1].get('decode_tokens_per_s'), '.0f')}"
               if row else "-")
        pre = (f"{_f(row[0].get('prefill_ms_per_prompt'), '.0f')} -> {_f(row[1].get('prefill_ms_per_prompt'), '.0f')}"
               if row else "-")
        lines.append(f"| {p['method']} ({p.get('mode', 'default')}) | {p['k'] or '-'} | {a['tokens_per_s']:.0f} | "
                     f"{b['tokens_per_s']:.0f} | {x} | {dec} | {pre} | "
                     f"{_f(a['acceptance_length'])} / {_f(b['acceptance_length'])} | {ms['verify']} | {ms['draft']} | "
                     f"{ms['host']} | {a['identical_to_ar']} / {b['identical_to_ar']} |")
    lines.append("")
    for mode in dict.fromkeys(p.get("mode", "default") for p in r["pairs"]):
        sides = [p["compiled"] for p in r["pairs"] if p.get("mode", "default") == mode and p["compiled"]
                 and "not_comparable" not in p]                 # a budget-cut phase: its prompts differ
        best = {m: max((x for x in sides if x.get("acceptance_length") and p_method(r, x) == m),
                       key=lambda x: x["tokens_per_s"], default=None) for m in ("eagle", "peagle")}
        ar = next((x for p, x in ((p, p["compiled"]) for p in r["pairs"]) if x and p["method"] == "ar"
                   and p.get("mode", "default") == mode and "not_comparable" not in p), None)
        if best["eagle"] and best["peagle"] and ar:
            e, q = best["eagle"], best["peagle"]
            lines.append(f"- {mode}: AR {ar['tokens_per_s']:.0f} tokens/s; best P-EAGLE (K={_k(r, q)}) / best EAGLE-3 "
                         f"(K={_k(r, e)}): **{q['tokens_per_s'] / e['tokens_per_s']:.2f}x**; best P-EAGLE / AR: "
                         f"{q['tokens_per_s'] / ar['tokens_per_s']:.2f}x")
    by_mode = r.get("ar_plain_vs_compiled_by_mode") or ({next(iter(p.get("mode", "default") for p in r["pairs"]))
                                                          : same} if same else {})
    for mode, same in by_mode.items():
        if same:
            lines += ["", f"AR {mode} vs plain AR ({dtype}): {same['identical']} of {same['prompts']} prompts identical, "
                      f"first difference at tokens {same['first_difference_at']}."]
    return lines + [""]


def _fused_rows(r: dict, pair: dict, side: dict) -> tuple[dict, dict] | None:
    """The raw result rows (plain, variant) behind a pair's two sides, for the fields pairs do not copy: the first
    row of the pair's method and K in a part of the pair's mode (as ``pair`` built them)."""
    def first(mode):                               # rows carry their side's mode since 2026-12-02 (older: none)
        return next((x for x in r["results"] if x["method"] == pair["method"] and x["k"] == pair["k"]
                     and x.get("mode") == mode), None)

    plain, variant = first("plain"), first(pair.get("mode", "default"))
    return (plain, variant) if plain and variant else None


def p_method(r: dict, side: dict) -> str | None:
    """The method of a pair's side (pairs hold it one level up)."""
    return next((p["method"] for p in r["pairs"] if p["compiled"] is side or p["plain"] is side), None)


def _k(r: dict, side: dict):
    return next((p["k"] for p in r["pairs"] if p["compiled"] is side or p["plain"] is side), None)


def _f(x, fmt=".2f"):
    return "-" if x is None else format(x, fmt)


def vllm_section(path: Path, r: dict) -> list[str]:
    """A `peagle-lab vllm-bench` sweep: best K per concurrency (ratios vs none), then every run."""
    from peagle_lab.serving.bench import best_by_concurrency

    s = r["settings"]
    lines = _run_header(path, r, f"); engine: {r.get('vllm_version')}, dtype {s['dtype']}, enforce_eager {s['enforce_eager']}",
                        "; load from `vllm bench serve`, acceptance from vLLM's /metrics") + [""]
    lines += [f"- {note}" for note in r.get("notes", [])] + ([""] if r.get("notes") else [])
    lines += ["Best K per concurrency (tokens/s; x none = ratio to no speculation at the same concurrency):", "",
              "| concurrency | none | best EAGLE-3 (K) | x none | best P-EAGLE (K) | x none | P-EAGLE / EAGLE-3 |",
              "|---|---|---|---|---|---|---|"]
    for b in best_by_concurrency(r["results"]):
        e = f"{_f(b.get('eagle'), '.1f')} (K={b['eagle_k']})" if "eagle" in b else "-"
        p = f"{_f(b.get('peagle'), '.1f')} (K={b['peagle_k']})" if "peagle" in b else "-"
        lines.append(f"| {b['concurrency']} | {_f(b['ar'], '.1f')} | {e} | {_f(b.get('eagle_x_ar'))} | {p} | "
                     f"{_f(b.get('peagle_x_ar'))} | {_f(b.get('peagle_x_eagle'))} |")
    lines += ["", "Every run:", "",
              "| method | K | concurrency | tokens/s | x none | AL | acceptance per position | identical to none |",
              "|---|---|---|---|---|---|---|---|"]
    base = {x["concurrency"]: x["tokens_per_s"] for x in r["results"] if x["method"] in ("ar", "none")}
    for x in r["results"]:
        ratio = x["tokens_per_s"] / base[x["concurrency"]] if x["concurrency"] in base else None
        pp = ", ".join(f"{a:.2f}" for a in x["acceptance_per_position"]) if x["acceptance_per_position"] else "-"
        lines.append(f"| {x['method']} | {x['k'] or '-'} | {x['concurrency']} | {x['tokens_per_s']:.1f} | {_f(ratio)} | "
                     f"{_f(x['acceptance_length'])} | {pp} | {x['identical_to_ar']} |")
    return lines + [""]


def vllm_cuda_section(path: Path, r: dict) -> list[str]:
    """The CUDA vLLM sweep (benchmarks/gpu/vllm_cuda_sweep.py): per prompt set, every method on the V1 model
    runner at its best K, then vLLM's own runner choice (V2) for AR and EAGLE-3 K=3."""
    from peagle_lab.serving.bench import best_by_concurrency

    s = r["settings"]
    lines = [f"`{path.name}` -- {r['date']}, {r['gpu']}, {r['vllm_version']}, torch {r['torch']}, {s['dtype']}, "
             f"CUDA graphs, T=0, {s['max_new_tokens']} new tokens, prompt sets {s['sets']} (spread); "
             f"command: `{r['command']}`", ""]
    for name in sorted({x["prompts"] for x in r["results"]}):
        for runner in ("v1", "auto"):
            rows = [x for x in r["results"] if x["prompts"] == name and x["runner"] == runner]
            if not rows:
                continue
            lines += [f"{name}, model runner {runner}:", "",
                      "| concurrency | AR | best EAGLE-3 (K, AL) | x AR | best P-EAGLE (K, AL) | x AR | P-EAGLE / EAGLE-3 |",
                      "|---|---|---|---|---|---|---|"]
            for b in best_by_concurrency(rows):
                e = f"{b['eagle']:.0f} (K={b['eagle_k']}, {b['eagle_al']:.2f})" if "eagle" in b else "-"
                p = f"{b['peagle']:.0f} (K={b['peagle_k']}, {b['peagle_al']:.2f})" if "peagle" in b else "-"
                lines.append(f"| {b['concurrency']} | {_f(b['ar'], '.0f')} | {e} | {_f(b.get('eagle_x_ar'))} | {p} | "
                             f"{_f(b.get('peagle_x_ar'))} | {_f(b.get('peagle_x_eagle'))} |")
            lines.append("")
    return lines


def knobs_section(path: Path, r: dict) -> list[str]:
    """The same small vllm-bench run under several server settings (threads, compilation)."""
    lines = [f"## `{path.name}`", "", f"- date: {r['date']}; machine: {r['machine']}", f"- {r['what']}",
             f"- command: `{r['command']}`", ""]
    lines += [f"- {note}" for note in r.get("notes", [])] + ([""] if r.get("notes") else [])
    lines += [f"- `{name}`: {v['setting']}" for name, v in r["variants"].items()] + [""]
    lines += ["| variant | method | K | concurrency | tokens/s | x none | AL | server start s |",
              "|---|---|---|---|---|---|---|---|"]
    for name, v in r["variants"].items():
        base = {x["concurrency"]: x["tokens_per_s"] for x in v["results"] if x["method"] in ("ar", "none")}
        for x in v["results"]:
            ratio = x["tokens_per_s"] / base[x["concurrency"]] if x["concurrency"] in base else None
            lines.append(f"| {name} | {x['method']} | {x['k'] or '-'} | {x['concurrency']} | "
                         f"{x['tokens_per_s']:.1f} | {_f(ratio)} | {_f(x['acceptance_length'])} | "
                         f"{_f(v.get('server_start_s', {}).get(x['method']), '.0f')} |")
    return lines + [""]


def kernel_section(path: Path, r: dict) -> list[str]:
    """`benchmarks/bench_kernel.py`: fused Triton kernel vs the torch reference vs an empty launch."""
    lines = [f"## `{path.name}`", "", f"- date: {r['date']}; device: {r.get('device')}; torch {r.get('torch')}, triton {r.get('triton')}",
             f"- command: `{r['command']}` (medians of `triton.testing.do_bench`)"] + [f"- {n}" for n in r.get("notes", [])] + ["",
             "| requests | K | with a 512-token prefill | Triton (launcher) us | torch reference us | empty launch us | x faster than torch | x launch floor |"
             " Triton in a CUDA graph us | empty in a CUDA graph us | graph x floor |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for x in r["rows"]:
        graph = (f"{1000 * x['triton_graph_ms']:.2f} | {1000 * x['empty_graph_ms']:.2f} | {x['graph_x_floor']:.2f}"
                 if "triton_graph_ms" in x else "- | - | -")
        if "graph_x_floor_block128_warps4" in x:
            graph += f" (launch {x['launch'][0]} slots / {x['launch'][1]} warps; 128 / 4: {x['graph_x_floor_block128_warps4']:.2f})"
        lines.append(f"| {x['num_reqs']} | {x['k']} | {x['with_prefill']} | {1000 * x['triton_ms']:.1f} | {1000 * x['torch_ref_ms']:.1f} | "
                     f"{1000 * x['empty_launch_ms']:.1f} | {x['speedup_vs_torch']:.0f} | {x['x_launch_floor']:.1f} | {graph} |")
    return lines + [""]


def _drafter_head(path: Path, r: dict, where: str, how: str, detail: str) -> list[str]:
    """Heading, date/device, command and the drafter's shape: the start of a section about one drafter size."""
    d = r["drafter"]
    return [f"## `{path.name}`", "", f"- date: {r['date']}; device: {where}", f"- command: `{r['command']}`{how}",
            f"- drafter: hidden {d['hidden_size']}, {d['num_layers']} layers, {d['num_heads']} heads / {d['num_kv_heads']} KV, {detail}"]


def memory_section(path: Path, r: dict) -> list[str]:
    """`benchmarks/bench_train_memory.py`: P-EAGLE training at 8B scale, single pass vs partitioned."""
    d = r["drafter"]
    lines = _drafter_head(path, r, f"{r['machine']}; torch {r.get('torch')}; {r.get('dtype')}", "",
                          f"MLP {d['intermediate_size']}, vocab {d['vocab_size']}, draft vocab {d['draft_vocab_size']} "
                          f"({r['weights_gib']:.1f} GiB of weights); COD to depth 8, keep ratio 0.7; one forward + backward")
    lines += ["",
             "| tokens | elements | attention | segments | peak GiB | above weights+data GiB | x single-pass | step s |",
             "|---|---|---|---|---|---|---|---|"]
    single = {(x["tokens"], x["attention"]): x for x in r["rows"] if x["segments"] == 1}
    for x in r["rows"]:
        if not x["ok"]:
            lines.append(f"| {x['tokens']} | {x['elements']} | {x['attention']} | {x['segments']} | out of memory | - | - | - |")
            continue
        one = single.get((x["tokens"], x["attention"]))
        ratio = f"{x['peak_above_start_gib'] / one['peak_above_start_gib']:.2f}" if one and one["ok"] else "single pass OOM"
        lines.append(f"| {x['tokens']} | {x['elements']} | {x['attention']} | {x['segments']} | {x['peak_gib']:.1f} | "
                     f"{x['peak_above_start_gib']:.1f} | {ratio} | {x['step_s']:.2f} |")
    return lines + [""]


def train_run_section(path: Path, r: dict) -> list[str]:
    """A shipped-drafter training run on the device (commands, steps, final per-depth accuracy)."""
    lines = [f"## `{path.name}`", "", f"- date: {r['date']}; machine: {r['machine']}", f"- data: {r['data']['source']}"]
    lines += ([f"- question: {r['question']}"] if r.get("question") else []) + [""]
    for run in r["runs"]:
        acc = ", ".join(f"{a:.2f}" for a in run["final_acc_per_depth"])
        lines += [f"### {run['method']}", "", f"- command: `{run['command']}`",
                  f"- attention {run['attention']}; {run['seconds_per_step']} s/step; exported at step {run['exported_step']} "
                  f"({run['conversations_seen']} conversations, {run['epochs']} epochs); last-batch loss {run['final_train_loss']:.3f}; "
                  f"top-1 agreement with the target per depth: {acc}", f"- {run['note']}"]
        if "peak_gpu_gib" in run:
            lines.append(f"- peak GPU memory {run['peak_gpu_gib']} GiB")
        if run.get("validation_al_k7"):
            step, al = run["validation_al_k7"][-1]
            lines.append(f"- validation AL (K=7, logged at checkpoints) at step {step}: {al}")
        lines.append("")
    return lines


def drafter_forward_section(path: Path, r: dict) -> list[str]:
    """`benchmarks/bench_drafter_forward.py`: one parallel pass over K slots vs one slot vs K sequential passes."""
    d = r["drafter"]
    lines = _drafter_head(path, r, f"{r.get('device')}; torch {r.get('torch')}", " (medians of `triton.testing.do_bench` on a GPU)",
                          f"head_dim {d['head_dim']}, MLP {d['intermediate_size']} ({d.get('intermediate_size_note', '')}), "
                          f"vocab {d['vocab_size']}, draft vocab {d['draft_vocab_size']}, {d['dtype']}, {d['weights']} weights")
    lines += [f"- {note}" for note in r.get("notes", [])] + ["",
             "| compile | B | K | single ms | parallel (P-EAGLE) ms | K sequential (EAGLE-3) ms | parallel / single | sequential / single |",
             "|---|---|---|---|---|---|---|---|"]
    for x in r["rows"]:
        lines.append(f"| {x['compile']} | {x['B']} | {x['K']} | {x['single_ms']:.2f} | {x['parallel_ms']:.2f} | {x['sequential_ms']:.2f} | "
                     f"{x['parallel_over_single']:.2f} | {x['sequential_over_single']:.2f} |")
    return lines + [""]


def train_step_section(path: Path, r: dict) -> list[str]:
    """`benchmarks/bench_train_step.py`: the trainer's step on a random SmolLM2-shaped target, per configuration."""
    lines = [f"## `{path.name}`", "", f"- date: {r['date']}; device: {r['machine']}; torch {r.get('torch')}",
             f"- command: `{r['command']}` (3 warm-up steps, then timed steps; CUDA synchronised)"]
    lines += [f"- {note}" for note in r.get("notes", [])] + ["",
              "| method | B | target pass | SDPA may use cuDNN | batches by length | s/step median | s/step mean | supervised elements/s | peak GiB |",
              "|---|---|---|---|---|---|---|---|---|"]
    for x in r["rows"]:
        cudnn = x.get("sdpa_cudnn_allowed", True)
        lines.append(f"| {x['method']} | {x['batch_size']} | {'bf16' if x['target_bf16'] else 'fp32'} | {cudnn} | "
                     f"{x.get('group_by_length', False)} | {x['step_s_median']:.3f} | {x.get('step_s_mean', float('nan')):.3f} | "
                     f"{x.get('supervised_per_s', float('nan')):,.0f} | {x['peak_gib']:.1f} |")
    return lines + [""]


def replay_section(path: Path, r: dict) -> list[str]:
    """`benchmarks/replay_acceptance.py`: acceptance replayed offline, agreement over all vs visited positions."""
    st = r["settings"]
    lines = [f"## `{path.name}`", "", f"- date: {r['date']}; machine: {r['machine']}", f"- command: `{r['command']}`",
             f"- {r['what']} ({st['prompts']}, {'spread' if st.get('spread') else 'first'} {st['num_prompts']} prompts, "
             f"{st['max_new_tokens']} new tokens, K={st['k']})"]
    if r.get("drafters_note"):
        lines.append(f"- drafters: {r['drafters_note']}")
    lines += ["",
             "| drafter | AL | acceptance per position | agreement, every position | agreement, where steps started | draft-vocab coverage |",
             "|---|---|---|---|---|---|"]
    for name, x in r["results"].items():
        fmt = lambda v: ", ".join(f"{a:.2f}" for a in v)  # noqa: E731
        lines.append(f"| {name} | {x['acceptance_length']:.3f} | {fmt(x['acceptance_per_position'])} | {fmt(x['agreement_all_positions'])} | "
                     f"{fmt(x['agreement_visited_positions'])} | {x['draft_vocab_coverage']:.1%} |")
    cats = [(n, x["acceptance_length_by_category"]) for n, x in r["results"].items() if "acceptance_length_by_category" in x]
    if cats:
        names = list(cats[0][1])
        lines += ["", "AL by MT-Bench category (ten prompts each):", "", "| drafter | " + " | ".join(names) + " |",
                  "|---|" + "---|" * len(names)]
        lines += [f"| {n} | " + " | ".join(f"{c[k]:.2f}" for k in names) + " |" for n, c in cats]
    return lines + [""]


def finetune_ab_section(path: Path, r: dict) -> list[str]:
    """A fine-tuning A/B on the device (same start, data and steps; one setting changed), with the replayed AL."""
    lines = [f"## `{path.name}`", "", f"- date: {r['date']}; machine: {r['machine']}", f"- {r['what']}",
             f"- data: {r['data']}; script: {r['script']}", "",
             "| run | objective | steps | last-batch agreement per depth | command |", "|---|---|---|---|---|"]
    for run in r["runs"]:
        acc = ", ".join(f"{a:.2f}" for a in run["final_acc_per_depth"])
        lines.append(f"| {run['name']} | {run['objective']} | {run['steps']} | {acc} | `{run['command']}` |")
    al = ", ".join(f"{k} {v:.3f}" for k, v in r["mt_bench_al_k7_80_prompts"].items())
    return lines + ["", f"MT-Bench AL at K=7, all 80 prompts (`{r['replay']}`): {al}. {r['conclusion']}.", ""]


def ablation_section(path: Path, r: dict) -> list[str]:
    """`benchmarks/ablation.py`: one row per lever and arm, AL at K=7 (and at K=3/5 where replayed)."""
    lines = [f"## `{path.name}`", "", f"- date: {r['date']}; machine: {r['machine']}", f"- command: `{r['command']}`",
             f"- {r['what']}", "", "| lever | arm | method | AL (K=7) | AL at K=3 / 5 / 7 | second-draft agreement | source |",
             "|---|---|---|---|---|---|---|"]
    for x in r["rows"]:
        by_k = " / ".join(f"{v:.3f}" for _, v in sorted(x.get("acceptance_length_by_k", {}).items(), key=lambda kv: int(kv[0])))
        lines.append(f"| {x['lever']} | {x['arm']} | {x['method']} | {x['acceptance_length']:.3f} | {by_k or '-'} | "
                     f"{_f(x['second_draft_agreement'], '.3f')} | [`{x['source'].rsplit('/', 1)[-1]}`](results/{x['source'].rsplit('/', 1)[-1]}) |")
    lines += ["", "Not measured yet:", ""] + [f"- {x['lever']}: {x['why']}" for x in r["not_measured"]]
    return lines + [""]


def ablation_eval_section(path: Path, r: dict) -> list[str]:
    """`benchmarks/ablation_eval.py`: several drafters replayed at several K on the same greedy replies."""
    st = r["settings"]
    ks = [str(k) for k in st["ks"]]
    lines = [f"## `{path.name}`", "", f"- date: {r['date']}; machine: {r['machine']}", f"- command: `{r['command']}`",
             f"- {st['prompts']}, first {st['num_prompts']} prompts, {st['max_new_tokens']} new tokens, T=0; greedy replies "
             f"{st['replies_seconds']} s", "",
             "| drafter | method | " + " | ".join(f"AL K={k}" for k in ks) + f" | acceptance per position (K={ks[-1]}) | "
             "second-draft agreement |", "|---|---|" + "---|" * len(ks) + "---|---|"]
    for name in r["results_by_k"][ks[-1]]:
        top = r["results_by_k"][ks[-1]][name]
        pos = ", ".join(f"{a:.2f}" for a in top["acceptance_per_position"])
        als = " | ".join(f"{r['results_by_k'][k][name]['acceptance_length']:.3f}" for k in ks)
        lines.append(f"| {name} | {top['method']} | {als} | {pos} | {_f(top['agreement_all_positions'][1], '.3f')} |")
    return lines + [""]


def recipe_run_section(path: Path, r: dict) -> list[str]:
    """A recipe run on the device: calls, data, and per arm its command, steps and validation AL curve."""
    if "runs" not in r:
        return generic_section(path, r)
    lines = [f"## `{path.name}`", "", f"- date: {r['date']}; machine: {r['machine']}", f"- {r['what']}",
             f"- data: {r['data']['source']}: {r['data']['samples']:,} samples, {r['data']['reply_tokens']:,} reply tokens",
             f"- recipe: `{r['recipe']}`", "- device calls:"] + [f"  - {c}" for c in r["device_calls"]]
    lines += ["", "| arm | what | steps | epochs | s/step | validation AL (K=7, 10 prompts) by step | command |",
              "|---|---|---|---|---|---|---|"]
    for run in r["runs"]:
        curve = ", ".join(f"{s}: {a:.3f}" for s, a in run["validation_al_k7_10_prompts"])
        lines.append(f"| {run['name']} | {run['what']} | {run['exported_step']} | {run['epochs']} | "
                     f"{run['seconds_per_step_median']} | {curve} | `{run['command']}` |")
    return lines + ["", r["reading"], ""]


def step_profile_section(path: Path, r: dict) -> list[str]:
    """`step_profile.py`: per captured step, kernels and their device time by family against the replay time."""
    if "rows" not in r:
        return generic_section(path, r)
    lines = [f"## `{path.name}`", "", f"- date: {r['date']}; machine: {r['machine']}, torch {r['versions']['torch']}",
             f"- {r['what']}"] + [f"- command: `{c}`" for c in r.get("commands", [r.get("command", "")])]
    lines += [f"- K={r['settings']['k']}, {r['settings']['dtype']}, cache of {r['settings']['max_len']} slots; empty "
              f"captured graph {r['launch_floor_us']:.1f} us", "",
              "| mode | step | kernels | kernel ms | replay ms | attention ms | matmul ms | other ms | top kernel |",
              "|---|---|---|---|---|---|---|---|---|"]
    for row in r["rows"]:
        if "error" in row:
            lines.append(f"| {row['mode']} | {row['method']} {row['step']} | error: {row['error']} | | | | | | |")
            continue
        fam = row.get("by_family_corrected") or row["by_family"]
        att = sum(v["ms_per_step"] for f, v in fam.items() if f.startswith("attention"))
        mm = sum(v["ms_per_step"] for f, v in fam.items() if f.startswith("matmul"))
        top = row["top_kernels"][0]
        lines.append(f"| {row['mode']} | {row['method']} {row['step']} | {row['kernels_per_step']:.0f} | "
                     f"{row['kernel_ms_per_step']:.3f} | {row['replay_ms']:.3f} | {att:.3f} | {mm:.3f} | "
                     f"{row['kernel_ms_per_step'] - att - mm:.3f} | `{top['name'][:48]}` {top['ms_per_step']:.3f} ms |")
    if r.get("family_note"):
        lines += ["", r["family_note"] + "."]
    return lines + ["", r.get("reading", ""), ""]


SECTIONS = {
    "vllm_cuda_": vllm_cuda_section,"ablation_eval_": ablation_eval_section, "step_profile_": step_profile_section, "ablation_": ablation_section, "device_recipe_": recipe_run_section,
            "device_finetune_": finetune_ab_section, "replay_": replay_section, "train_step_": train_step_section, "kernel_": kernel_section, "train_memory_": memory_section, "drafter_forward_": drafter_forward_section,
            "fused_engine_": fused_section}


def file_section(path: Path, r: dict) -> list[str]:
    """The section for one result file, chosen by its name or by the fields it has."""
    special = next((fn for prefix, fn in SECTIONS.items() if path.name.startswith(prefix)), None)
    if special:
        return special(path, r)
    if "runs" in r and "data" in r:
        return train_run_section(path, r)
    if "variants" in r:
        return knobs_section(path, r)
    if r.get("engine") == "vllm" and "results" in r:
        return vllm_section(path, r)
    if "results" in r and "settings" in r:
        return bench_section(path, r)
    return generic_section(path, r)


def generic_section(path: Path, r: dict) -> list[str]:
    """A record without a renderer of its own: date, machine and question, then every field, folded."""
    return [f"## `{path.name}`", "", f"- date: {r.get('date')}; machine: {r.get('machine')}", f"- {r.get('what', '')}",
            "", "<details><summary>all fields</summary>", "", "```json",
            json.dumps({k: v for k, v in r.items() if k not in ("date", "machine", "what")}, indent=1), "```", "",
            "</details>", ""]


# One topic per study: the files that hold its current results, then the earlier runs they replaced (kept for the
# record, never deleted). Every file in results/ appears once; a file no topic names lands in "Other results".
TOPICS = [
    ("Teaching engine (`peagle-lab bench`)", "teaching-engine-bench.md",
     {"bench_cpu_mtbench.json": "tokens/s and acceptance of AR, transformers, EAGLE-3 and P-EAGLE on CPU",
      "bench_cpu_batched.json": "the same, 4 requests decoded together",
      "bench_h200_mtbench.json": "the same code with the target on an H200"},
     {}, ["gpu_engine_tests_h200.log"]),
    ("Serving in vLLM (`peagle-lab vllm-bench`)", "vllm-cpu-serving.md",
     {"vllm_cpu_sweep_spread.json": "method x K x concurrency, 12 prompts spread over MT-Bench, shipped drafters",
      "vllm_cpu_sweep.json": "the same sweep on the first 12 MT-Bench prompts",
      "vllm_cpu_crosscheck.json": "vLLM's drafts and acceptance vs the teaching engine's",
      "vllm_cpu_knobs.json": "server settings: thread binding, compilation",
      "vllm_shared_head_probe.json": "vLLM serving a drafter that shares the target's output layer",
      "vllm_cuda_h200_sweep.json": "CUDA vLLM on an H200: every method at K 3/5/7 on one model runner, 80 MT-Bench + "
                                   "32 HumanEval prompts, concurrency 1-64"},
     {"vllm_cpu_sweep_drafters_run1.json": "", "vllm_cpu_sweep_drafters_run2.json": "",
      "vllm_cpu_sweep_drafters_run3.json": "", "vllm_cpu_sweep_drafters_run4.json": ""}, []),
    ("Fast GPU engine (static caches, CUDA graphs, fused steps)", "fast-engine.md",
     {"fused_engine_h200_pgraph_k3k7.json": "the fastest default configuration (compiled steps, Triton attention, the "
                                             "prompt's pass in captured buckets) at K=3 and 7, bf16, batch 1",
      "fused_engine_h200_pgraph_max_k5.json": "the same with inductor's max-autotune mode, K=5: AR over 1,000 tokens/s",
      "fused_engine_h200_pgraph_max_k7.json": "the same with max-autotune, K=7",
      "fused_engine_h200_pgraph_fp32.json": "float32 with the prompt graphs: the lossless oracle on CUDA",
      "fused_engine_h200_best_k3k7.json": "compiled steps, Triton attention, prompt pass eager without cuDNN, K=3 and 7",
      "fused_engine_h200_best_k5.json": "the same at K=5, and with inductor's max-autotune mode",
      "fused_engine_h200_fp32.json": "float32: the lossless oracle on CUDA with the Triton attention, plain and compiled",
      "fused_engine_h200_attention_k5.json": "compiled steps with SDPA vs with the Triton cache attention, K=5",
      "fused_engine_h200_attention_k7.json": "the Triton attention and SDPA without cuDNN, plain and compiled, K=7",
      "step_profile_h200_attention.json": "where a captured step's time goes with the Triton attention; the prompt's pass",
      "fast_engine_h200.json": "AR, EAGLE-3 and P-EAGLE at K=1..8, bf16 and fp32, batch 1, with the step's time split",
      "fused_engine_cpu.json": "the fusion lever on a 2-core CPU"},
     {"fused_engine_h200.json": "", "step_profile_h200.json": "", "fused_engine_h200_coldcache.json": ""},
     ["fast_engine_tests_h200.log", "fused_engine_tests_h200.log", "logs/gpu_fast_engine_tests_h200_pool.log",
      "logs/gpu_fast_engine_tests_h200_pgraph.log",
      "logs/fused_engine_tests_h200_pgraph_call1.log"]
     + [f"logs/fused_engine_h200_pgraph_{c}.log" for c in ("k3k7", "max_k5", "max_k7", "fp32")]
     + ["logs/fused_engine_tests_h200_attention_call1.log",
      "logs/fused_engine_tests_h200_attention_call5.log", "logs/step_profile_h200_attention.log",
      "logs/step_profile_h200.log", "logs/step_profile_h200_maxautotune.log"]
     + [f"logs/fused_engine_h200_attention_call_{c}.log" for c in "abcde"]),
    ("Acceptance (replayed and measured)", "acceptance-by-category.md",
     {"replay_acceptance_mtbench80.json": "AL of the shipped and larger drafters on all 80 MT-Bench prompts, per category",
      "replay_acceptance_capacity.json": "AL of drafters above the shipping size limit, all 80 MT-Bench prompts",
      "replay_acceptance_humaneval40.json": "AL on 40 HumanEval prompts",
      "replay_acceptance_mtbench.json": "AL on the first 10 MT-Bench prompts",
      "replay_eval_h200_mtbench40.json": "`peagle-lab eval` on an H200 vs the CPU",
      "drafter_generalization.json": "agreement on training vs unseen text"},
     {"drafter_eval_mtbench_k7.json": ""}, ["gpu_eval_tests_h200.log"]),
    ("Training runs", "training-runs.md",
     {"device_train_2026-12-01d.json": "the shipped pair, trained side by side",
      "device_train_2026-12-01e.json": "drafters through the target's output layer (full vocabulary)",
      "device_train_2026-12-01f.json": "drafters above the shipping size limit",
      "device_finetune_objective_2026-12-01.json": "training objective: KL vs cross-entropy on the top token",
      "replay_acceptance_objective_ab.json": "AL of the objective fine-tunes",
      "data_stats.json": "the training data: size, loops, coverage"},
     {"device_train_2026-11-30.json": "", "device_train_2026-12-01.json": "", "device_train_2026-12-01b.json": "",
      "device_train_2026-12-01c.json": "", "head_init_ab_cpu.json": ""},
     ["logs/run6-train-eagleS-smollm2.log", "logs/run6-train-peagleS-smollm2.log", "logs/run6-train-peagle3-smollm2.log",
      "logs/run7-train-peagleL4-smollm2.log", "logs/run7-train-peagleL2-smollm2.log", "logs/run7-train-eagleL2-smollm2.log"]),
    ("Training speed and memory", "training-speed-and-memory.md",
     {"train_step_grouped_h200.json": "a training step with batches grouped by length",
      "train_step_cudnn_h200.json": "a training step with and without cuDNN attention",
      "train_step_h200.json": "a training step with the target's pass in fp32 vs bf16",
      "train_memory_h200.json": "sequence partitioning at 8B scale: memory and step time"},
     {}, ["flex_cuda_tests_h200.log"]),
    ("P-EAGLE recipe and its ablation", "peagle-recipe.md",
     {"ablation_135m.json": "the ablation table at 135M: AL per lever, arms trained side by side",
      "ablation_eval_recipe4_mtbench80.json": "the sampled-reply data arms (x2.2 reply tokens) at K=3/5/7, all 80 MT-Bench prompts",
      "device_recipe_2026-12-02k.json": "the fifth recipe window: both methods on the greedy archive plus two sampled replies a turn",
      "ablation_eval_recipe3_mtbench80.json": "the epochs arms (~20 epochs) at K=3/5/7, all 80 MT-Bench prompts",
      "device_recipe_2026-12-02j.json": "the fourth recipe window: the P-EAGLE recipe and EAGLE-3 alone for 15 minutes (~20 epochs)",
      "ablation_eval_recipe2_mtbench80.json": "noise and data arms, and the shipped pair fine-tuned, at K=3/5/7, all 80 MT-Bench prompts",
      "ablation_eval_recipe_mtbench80.json": "mask-token arms and EAGLE-3 at the same budget, at K=3/5/7, all 80 MT-Bench prompts",
      "device_recipe_2026-12-01i.json": "the second recipe run: noise, data size, fine-tuning the shipped pair with a learned mask row",
      "device_recipe_2026-12-01h.json": "the first recipe run: four arms side by side on 4,119 multi-turn samples"},
     {"device_recipe_2026-12-01g.json": ""},
     ["logs/recipe-h-train-peagleR.log", "logs/recipe-h-train-peagleM0.log", "logs/recipe-h-train-peagleF16.log",
      "logs/recipe-h-train-eagleR.log", "logs/recipe-i-train-peagleR.log", "logs/recipe-i-train-peagleN0.log",
      "logs/recipe-i-train-peagleX1.log", "logs/recipe-i-train-peagleFT.log", "logs/recipe-i-train-eagleFT.log",
      "logs/recipe-j-train-peagleE.log", "logs/recipe-j-train-eagleE.log", "logs/recipe-k-train-peagleS3.log",
      "logs/recipe-k-train-eagleS3.log", "logs/recipe-k-regen-t07a.log", "logs/recipe-k-regen-t07b.log"]),
    ("Several GPUs (DDP)", "training.md",
     {"ddp_tests_h200_1gpu.json": "all-reduced gradients of 2 processes vs one process on CUDA (one H200, gloo)"},
     {}, ["ddp_tests_h200_1gpu.log"]),
    ("Notebooks on a GPU", "gpu-recipe.md",
     {"notebooks_cuda_h200.json": "notebooks 01-04 under nbmake with device=cuda"},
     {}, ["notebooks_cuda_h200.log"]),
    ("Kernel", "kernel-timings.md",
     {"kernel_h200_2026-12-01b.json": "the Triton kernel vs its torch reference and an empty launch (launch shape by request length)",
      "kernel_h200.json": "the same, first run"},
     {}, []),
    ("Batched decoding and the drafter's forward pass", "batched-decoding.md",
     {"batch_rows_h200.json": "AR, EAGLE-3 and P-EAGLE decoding 8, 32 and 64 requests at once on an H200, bf16",
      "batch_profile_h200_cudnn.json": "where a batched step's time went before SDPA skipped cuDNN",
      "drafter_forward_cudagraph_h200.json": "one parallel pass vs one slot vs K sequential passes, CUDA graphs",
      "drafter_forward_h200.json": "the same, eager"},
     {"batch_rows_h200_attempt1.json": ""},
     ["logs/batch_engine_tests_h200.log", "logs/batch_rows_h200.log", "logs/batch_profile_h200_cudnn.log",
      "logs/batch_engine_tests_h200_attempt1.log", "logs/batch_rows_h200_attempt1.log"]),
]


def _date_machine(r: dict) -> tuple[str, str]:
    machine, device = str(r.get("machine") or "?"), r.get("device")
    if isinstance(device, str) and device not in machine:        # GPU benchmarks record the host as machine
        machine = f"{device} (host: {machine})"
    return str(r.get("date", "?")), machine


def _demote(lines: list[str], levels: int, path: Path) -> list[str]:
    """Push a file section's headings down under its topic and put the raw-JSON link under its title."""
    out, in_code = [], False
    for line in lines:
        if line.startswith("```"):
            in_code = not in_code
        if not in_code and line.startswith("#"):
            out.append("#" * levels + line)
            if line == f"## `{path.name}`":
                out += ["", f"Raw data: [`results/{path.name}`](results/{path.name})"]
        else:
            out.append(line)
    return out


def render() -> str:
    """RESULTS.md's text, from the files in results/."""
    results = HERE / "results"
    records = {p.name: json.loads(p.read_text()) for p in sorted(results.glob("*.json"))}
    named = {n for _, _, cur, old, _ in TOPICS for n in (*cur, *old)}
    topics = TOPICS + [("Other results", None, {n: r.get("what", "") for n, r in records.items() if n not in named}, {}, [])]
    topics = [t for t in topics if t[2] or t[3]]

    out = ["# Benchmark results", "",
           "Generated by `python benchmarks/make_results.py` from the raw files in `benchmarks/results/` "
           "(never edit this file by hand). Every table names its date, machine and command; the study pages in "
           "[`docs/`](../docs/README.md) explain what the figures mean.", "",
           "Commands recorded before the GPU scripts moved from `benchmarks/device/` to `benchmarks/gpu/` keep their old "
           "paths; [`gpu/README.md`](gpu/README.md) says where each script is now, or how to recover it from git history.", "",
           "## Current results", "",
           "| topic | result | date | machine | raw data |", "|---|---|---|---|---|"]
    for title, page, cur, _, _ in topics:
        for name, label in cur.items():
            if name in records:
                date, machine = _date_machine(records[name])
                out.append(f"| {title} | {label} | {date} | {machine} | [`{name}`](results/{name}) |")
    out.append("")
    for title, page, cur, old, logs in topics:
        out += [f"## {title}", ""]
        if page:
            out += [f"What the figures mean: [`docs/{page}`](../docs/{page}).", ""]
        present = [n for n in logs if (results / n).exists()]
        if present:
            out += ["Logs: " + ", ".join(f"[`{n}`](results/{n})" for n in present) + ".", ""]
        for name in cur:
            if name in records:
                out += _demote(file_section(results / name, records[name]), 1, results / name)
        earlier = [n for n in old if n in records]
        if earlier:
            out += ["### Earlier runs", "", "Replaced by the results above; kept as the record of how they came about.", ""]
            for name in earlier:
                out += _demote(file_section(results / name, records[name]), 2, results / name)
    return "\n".join(out)


def main() -> None:
    (HERE / "RESULTS.md").write_text(render())
    print(f"wrote {HERE / 'RESULTS.md'}")


if __name__ == "__main__":
    main()
