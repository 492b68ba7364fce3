#!/usr/bin/env bash
# Here, around the parking calls of data_scale.sh: the tracked tree rides every device call (~34 MB, 29 MB of it the
# shipped drafters), so a call carries one 31 MB vLLM part beside it. With the drafters and the recipe replies moved
# out of the tree (to /tmp/peagle-slim) it weighs about 3 MB, and two parts fit a call: 8 parking calls instead of 15.
#
#   bash lab/gpu/slim_tree.sh out    # before the first parking call
#   bash lab/gpu/slim_tree.sh back   # before the START=1 call, which copies the shipped pair for the eval
#
# Nothing is deleted: `back` (or `git checkout -- peagle_lab/drafters lab/gpu/data`) restores them.
set -euo pipefail
cd "$(dirname "$0")/../.."
HOLD=${SLIM_HOLD:-/tmp/peagle-slim}
MOVED=(peagle_lab/drafters lab/gpu/data/recipe_greedy_4119.tgz)
case "${1:-}" in
  out)
    mkdir -p "$HOLD"
    for p in "${MOVED[@]}"; do
      if [ -e "$HOLD/$(basename "$p")" ]; then
        echo "slim_tree.sh: $HOLD/$(basename "$p") exists: run 'back' first" >&2; exit 1
      fi
      mv "$p" "$HOLD/"
    done
    bytes=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -n 1 | cut -f1)
    echo "tree: $bytes bytes travel (two parts a call fit)" ;;
  back)
    for p in "${MOVED[@]}"; do
      [ -e "$HOLD/$(basename "$p")" ] && [ ! -e "$p" ] && mv "$HOLD/$(basename "$p")" "$p"
    done
    git diff --quiet --exit-code -- peagle_lab/drafters lab/gpu/data \
      && echo "tree whole again" || { echo "slim_tree.sh: the tree differs from git: git status" >&2; exit 1; } ;;
  *)
    echo "usage: slim_tree.sh out | back" >&2; exit 2 ;;
esac
