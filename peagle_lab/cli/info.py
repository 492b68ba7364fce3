"""``peagle-lab info``: versions, devices, the target, datasets and shipped drafters."""
from __future__ import annotations

import argparse
import json

NAME = "info"


def add_parser(sub) -> argparse.ArgumentParser:
    s = sub.add_parser("info", help="versions, devices, target, datasets and shipped drafters")
    s.add_argument("--json", action="store_true", help="print only JSON on stdout")
    return s


def run(args) -> int:
    from ..info import collect

    info = collect()
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    print(f"peagle-lab {info['peagle_lab']}  python {info['python']}  {info['platform']}")
    print("versions: " + ", ".join(f"{k} {v}" for k, v in info["versions"].items() if v))
    dev = info["device"]
    cuda = "yes: " + ", ".join(dev["cuda_devices"]) if dev["cuda_available"] else "no"
    print(f"device: {dev['cpu_count']} CPUs, CUDA {cuda}")
    t = info["target"]
    print(f"target: {t['default']}  gguf={t['gguf']}  converted={t['converted']} ({t['hf_folder']})")
    for name, d in info["datasets"].items():
        print(f"dataset {name}: {d.get('count', '?')} prompts  {d['path'] or d['error']}")
    for d in info["drafters"] or [{"name": "(none shipped yet)", "path": ""}]:
        print(f"drafter {d['name']}: {d['path']}")
    return 0
