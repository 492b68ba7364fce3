#!/usr/bin/env bash
# Join the GGUF's three parts into $PEAGLE_GGUF (parts 00 and 01 parked in /tmp/pk by 06_park.sh, part 02 carried by
# this call), atomically: a missing part (a park call that found no machine, so the machine started later without
# it) stops the call with the part's name instead of leaving a truncated GGUF behind for every later call to trip on.
G=${PEAGLE_GGUF:-/tmp/pk/SmolLM2-135M-Instruct.Q4_1.gguf}
PARTS=(/tmp/pk/gguf.part-00 /tmp/pk/gguf.part-01 parts/gguf.part-02)
for p in "${PARTS[@]}"; do
  if [ ! -f "$p" ]; then
    [ -f "$G" ] && exit 0                   # joined by an earlier call (that call checked it)
    echo "join_gguf: $p is missing: park it with 06_park.sh (carry parts/${p##*/}) and run again" >&2; exit 1
  fi
done
# a GGUF of the wrong size (a join cut short before this script existed) is joined again
[ -f "$G" ] && [ "$(stat -c %s "$G")" = "$(cat "${PARTS[@]}" | wc -c)" ] && exit 0
cat "${PARTS[@]}" > "$G.tmp" && mv "$G.tmp" "$G"
