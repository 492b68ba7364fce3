#!/usr/bin/env bash
# Here, after each data_scale.sh call: unpack the carry folders it brought back (carry-<method>.tar.N pieces) into
# parts/resume-<method>/, replacing the older one only when the new one unpacks whole.
#
#   bash benchmarks/gpu/keep_carry.sh FILES_AT        # the folder the call's files came back to
#
# parts/resume-peagle/ and parts/resume-eagle/ are then what the next allocation parks (one call each) to go on
# with --resume. parts/ does not outlive a fresh checkout: when the run stops, keep the last carry folders in the
# repository's history (benchmarks/gpu/resume_parts.sh says how).
set -euo pipefail
cd "$(dirname "$0")/../.."
FROM=${1:?usage: keep_carry.sh FILES_AT}
P=${PARTS:-parts}                                   # where the resume folders go (tests point it elsewhere)
for m in peagle eagle; do
  ls "$FROM"/carry-$m.tar.* > /dev/null 2>&1 || continue
  T=$(mktemp -d)
  if cat "$FROM"/carry-$m.tar.* | tar xf - -C "$T" && [ -f "$T/carry-$m/resume-$m.json" ]; then
    rm -rf "$P/resume-$m" && mkdir -p "$P" && mv "$T/carry-$m" "$P/resume-$m"
    echo "$P/resume-$m: $(cat "$P/resume-$m/resume-$m.json")"
  else
    echo "carry-$m did not unpack whole: $P/resume-$m is unchanged" >&2
  fi
  rm -rf "$T"
done
