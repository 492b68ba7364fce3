#!/usr/bin/env bash
# Device call 2: park the second third of the GGUF (the tracked tree + one part stay under 64 MiB)
# and the greedy data regenerated on 2026-11-30 (10,240 ShareGPT conversations).
# Carry: parts/gguf.part-01 parts/data.tgz
set -uxo pipefail
cp parts/gguf.part-01 /tmp/pk/ && tar xzf parts/data.tgz -C /tmp/pk && ls -la /tmp/pk /tmp/pk/data | head -n 20
