# Sourced by pipeline.sh and levers.sh: the work folder, a clock for stage lines, the ShareGPT turns unpacked and the
# target converted once (target.done tells lab/gpu/32_notebooks_cuda.sh it may link the converted target).
set -uo pipefail
W=/tmp/ds
t0=$SECONDS
stamp() { echo "[$((SECONDS - t0)) s] $*"; }
zcat /tmp/vp/sharegpt_turns.jsonl.gz > $W/sharegpt_turns.jsonl
python -c "from peagle_lab.target import Target; Target.load(device='cuda')" || exit 1
touch $W/target.done
stamp "target converted"
