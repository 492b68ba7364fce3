#!/usr/bin/env bash
# Here, after each data_scale.sh call: unpack the carry folders it brought back (carry-<method>.tar.N pieces) into
# parts/resume-<method>/, replacing the older one only when the new one unpacks whole.
#
#   bash lab/gpu/keep_carry.sh FILES_AT        # the folder the call's files came back to
#
# parts/resume-peagle/ and parts/resume-eagle/ are then what the next allocation parks (one call each) to go on
# with --resume. parts/ does not outlive a fresh checkout: when the run stops, keep the last carry folders in the
# repository's history (lab/gpu/resume_parts.sh says how).
set -euo pipefail
cd "$(dirname "$0")/../.."
FROM=${1:?usage: keep_carry.sh FILES_AT}
P=${RESUME_PARTS:-parts}                            # where the resume folders go (tests point it elsewhere)
for m in peagle eagle; do
  ls "$FROM"/carry-$m.tar.* > /dev/null 2>&1 || continue
  T=$(mktemp -d)
  # whole: every piece unpacks, and the export and key file that resume-<m>.json names are there in full
  if cat "$FROM"/carry-$m.tar.* | tar xf - -C "$T" && [ -f "$T/carry-$m/resume-$m.json" ] && python3 - "$T/carry-$m" "$m" <<'PY'
import json, sys
from pathlib import Path
folder, m = Path(sys.argv[1]), sys.argv[2]
r = json.loads((folder / f"resume-{m}.json").read_text())[m]
export = folder / r["export"]
need = [export / "config.json", export / "model.safetensors", folder / r.get("seen_file", f"seen-{m}.pt")]
if not all(f.is_file() and f.stat().st_size > 0 for f in need):
    sys.exit(1)
w = need[1].read_bytes()                         # safetensors: 8-byte header size, JSON header, then the tensors
n = int.from_bytes(w[:8], "little")
ends = [t["data_offsets"][1] for k, t in json.loads(w[8:8 + n]).items() if k != "__metadata__"]
sys.exit(0 if len(w) == 8 + n + max(ends, default=0) else 1)
PY
  then
    rm -rf "$P/resume-$m" && mkdir -p "$P" && mv "$T/carry-$m" "$P/resume-$m"
    echo "$P/resume-$m: $(cat "$P/resume-$m/resume-$m.json")"
  else
    echo "carry-$m did not unpack whole: $P/resume-$m is unchanged" >&2
  fi
  rm -rf "$T"
done
