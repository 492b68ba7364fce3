"""``peagle-lab``: the command line. Results go to stdout; logs and progress bars to stderr."""
from __future__ import annotations

import argparse
import json
import sys


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 3,5,7, got {text!r}") from None


def _methods(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def cmd_info(args) -> int:
    from .info import collect

    info = collect()
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(f"peagle-lab {info['peagle_lab']}  python {info['python']}  {info['platform']}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in info["versions"].items() if v))
    dev = info["device"]
    print(f"device: {dev['cpu_count']} CPUs, CUDA {'yes: ' + ', '.join(dev['cuda_devices']) if dev['cuda_available'] else 'no'}")
    t = info["target"]
    print(f"target: {t['default']}  gguf={t['gguf']}  converted={t['converted']} ({t['hf_folder']})")
    for name, d in info["datasets"].items():
        print(f"dataset {name}: {d.get('count', '?')} prompts  {d['path'] or d['error']}")
    for d in info["drafters"] or [{"name": "(none shipped yet)", "path": ""}]:
        print(f"drafter {d['name']}: {d['path']}")
    return 0


def cmd_generate(args) -> int:
    from .drafter import load_drafter
    from .engine import generate
    from .target import Target

    target = Target.load(args.target)
    drafter = load_drafter(args.drafter, target) if args.drafter else None
    out = generate(target, target.chat_ids(args.prompt), method=args.method, drafter=drafter, k=args.k,
                   max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p, seed=args.seed)
    print(target.decode(out.tokens))
    tps = len(out.tokens) / out.seconds if out.seconds else 0.0
    extra = f", AL {out.acceptance.acceptance_length:.2f}" if out.acceptance else ""
    print(f"[{args.method}] {len(out.tokens)} tokens in {out.seconds:.2f} s = {tps:.1f} tok/s{extra}", file=sys.stderr)
    return 0


def cmd_bench(args) -> int:
    from .bench import run_bench, write_json

    result = run_bench(methods=args.methods, ks=args.k, prompts=args.prompts, num_prompts=args.num_prompts,
                       max_new_tokens=args.max_new_tokens, temperature=args.temperature, target_name=args.target,
                       eagle_drafter=args.eagle_drafter, peagle_drafter=args.peagle_drafter, seed=args.seed)
    write_json(result, args.json)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="peagle-lab", description="Learn, train and serve P-EAGLE parallel speculative decoding.")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("info", help="versions, devices, target, datasets and shipped drafters")
    s.add_argument("--json", action="store_true", help="print only JSON on stdout")
    s.set_defaults(fn=cmd_info)

    s = sub.add_parser("generate", help="generate a reply to one prompt (ar, eagle or peagle)")
    s.add_argument("prompt")
    s.add_argument("--method", default="ar", choices=["ar", "eagle", "peagle"])
    s.add_argument("--drafter", help="drafter checkpoint folder (needed for eagle / peagle)")
    s.add_argument("--k", type=int, default=5, help="draft tokens per step")
    s.add_argument("--max-new-tokens", type=int, default=128)
    s.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    s.add_argument("--top-p", type=float, default=1.0)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--target", default=None, help="HF model id or folder (default: embedded SmolLM2-135M-Instruct)")
    s.set_defaults(fn=cmd_generate)

    s = sub.add_parser("bench", help="tokens/s and acceptance of ar, hf, eagle, peagle on the same prompts")
    s.add_argument("--methods", type=_methods, default=["ar", "hf", "eagle", "peagle"], help="comma list of ar,hf,eagle,peagle")
    s.add_argument("--k", type=_ints, default=[3, 5, 7], help="draft lengths, e.g. 3,5,7")
    s.add_argument("--prompts", default="mt-bench", help="mt-bench, humaneval, sharegpt or a .jsonl file")
    s.add_argument("--num-prompts", type=int, default=10)
    s.add_argument("--max-new-tokens", type=int, default=128)
    s.add_argument("--temperature", type=float, default=0.0)
    s.add_argument("--eagle-drafter", default=None)
    s.add_argument("--peagle-drafter", default=None)
    s.add_argument("--target", default=None)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--json", default=None, help="also write the result to this file")
    s.set_defaults(fn=cmd_bench)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
