#!/usr/bin/env bash
# Started by gpu.sh (PIPELINE=target_only) under setsid: only the shared start (the target converted once), for a
# device window that runs the notebooks alone (lab/gpu/32_notebooks_cuda.sh waits for regen.done before 05).
source "$(dirname "$0")/prelude.sh"
touch $W/regen.done $W/done
