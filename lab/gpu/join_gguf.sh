#!/usr/bin/env bash
# Join the GGUF's three parts into $PEAGLE_GGUF (parts 00 and 01 parked in /tmp/pk by 06_park.sh, part 02 carried by
# this command), atomically: a missing part (a park command that reached another machine) stops the command with the
# part's name instead of leaving a truncated GGUF behind for every following command to trip on.
# Called by the measuring scripts (bash lab/gpu/join_gguf.sh || exit 1); a GGUF already joined is kept.
G=${PEAGLE_GGUF:-/tmp/pk/SmolLM2-135M-Instruct.Q4_1.gguf}
PARTS=(/tmp/pk/gguf.part-00 /tmp/pk/gguf.part-01 parts/gguf.part-02)
for p in "${PARTS[@]}"; do
  if [ ! -f "$p" ]; then
    [ -f "$G" ] && exit 0                   # already joined (and checked) on this machine
    echo "join_gguf: $p is missing: park it with 06_park.sh (carry parts/${p##*/}) and run again" >&2; exit 1
  fi
done
# a GGUF of the wrong size (a join cut short) is joined again
[ -f "$G" ] && [ "$(stat -c %s "$G")" = "$(cat "${PARTS[@]}" | wc -c)" ] && exit 0
cat "${PARTS[@]}" > "$G.tmp" && mv "$G.tmp" "$G"
