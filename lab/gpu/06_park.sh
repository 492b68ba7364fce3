#!/usr/bin/env bash
# Park inputs on the GPU machine for the scripts run after it: copy what this command carries into /tmp/pk.
# A command carries the tracked tree plus at most 64 MiB, so the GGUF (three 32.8 MB parts) and the data travel
# over several commands, each within 30 s of the last; the measuring script's own command carries the third
# GGUF part, which join_gguf.sh joins to the two parked here.
#   parts/gguf.part-00, -01  -> /tmp/pk/gguf.part-0N
#   parts/data*.tgz          -> unpacked into /tmp/pk (training shards: data/, data_t07/)
#   parts/*.jsonl.gz         -> /tmp/pk (prompt files, e.g. sharegpt_turns.jsonl.gz for 20_recipe.sh)
#   parts/nbwheels/          -> /tmp/pk/nbwheels (for 21_notebooks_cuda.sh; carry it alone: tree + 28 MB)
#   parts/wheels/            -> /tmp/pk/wheels (install_wheels.sh installs them offline)
# Run from the repository root, once per carried set, e.g. carrying parts/gguf.part-00 parts/data_t07.tgz,
# then parts/gguf.part-01 parts/data.tgz:   bash lab/gpu/06_park.sh
set -uxo pipefail
mkdir -p /tmp/pk
for f in parts/gguf.part-0*; do cp "$f" /tmp/pk/; done
for f in parts/data*.tgz; do [ -f "$f" ] && tar xzf "$f" -C /tmp/pk; done
for f in parts/*.jsonl.gz; do [ -f "$f" ] && cp "$f" /tmp/pk/; done
[ -d parts/nbwheels ] && mkdir -p /tmp/pk/nbwheels && cp -r parts/nbwheels/. /tmp/pk/nbwheels/
# parts/wheels parked too (with nbwheels: the tree, one GGUF part and all of parts/wheels exceed 64 MiB since the
# tree holds the data archive), so the call carrying gguf.part-02 can carry it alone.
[ -d parts/wheels ] && mkdir -p /tmp/pk/wheels && cp parts/wheels/*.whl /tmp/pk/wheels/
ls -la /tmp/pk; ls /tmp/pk/data* | wc -l
