#!/usr/bin/env bash
# Device session B of 2026-12-01 (3rd), calls 1 and 2: park the GGUF's first two thirds and both data sets
# (each call: tracked tree ~29 MB + one GGUF part 32.8 MB + one data archive stays under 64 MiB).
# Call 1 carries parts/gguf.part-00 parts/data_t07.tgz; call 2 parts/gguf.part-01 parts/data.tgz.
# A call carrying parts/nbwheels (alone: tracked tree + 28 MB) parks it as /tmp/pk/nbwheels for 21_notebooks_cuda.sh.
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
