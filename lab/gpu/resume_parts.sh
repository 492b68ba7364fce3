#!/usr/bin/env bash
# Keep a data-scaling run's carry folders in the repository's history, and get them back in any later checkout.
#
# parts/ is git-ignored, so it does not outlive a fresh checkout; the tracked tree rides every device call, so
# ~32 MB of drafters cannot stay in it either. `keep` commits parts/resume-peagle/ and parts/resume-eagle/ (what
# keep_carry.sh unpacked: weights, sample keys, resume-<method>.json) under benchmarks/gpu/resume/ and removes them
# again in a second commit: the history holds them, the tree stays small. `restore` writes them back to parts/.
#
#   bash lab/gpu/resume_parts.sh keep "what they are"   # two commits
#   bash lab/gpu/resume_parts.sh restore [COMMIT]       # default: the newest commit that kept some
#
# Keep nothing else this way. A file added and removed counts twice against what one submission may weigh (256 MiB
# of diffs): `keep` first asks history_budget.py whether the session's commits plus twice these folders still fit
# (HISTORY_LIMIT_MIB, default 200) and refuses, committing nothing, when they would not. Regenerated data never
# belongs here: a script makes it again, and ~106 MB of it once cost a whole session's submission.
#
# Then park parts/resume-peagle and parts/resume-eagle (PARK_ONLY=1 bash lab/gpu/data_scale.sh, one call
# each: under 31 MB) and start the run with them (--resume, as data_scale.sh's header says).
set -euo pipefail
cd "$(dirname "$0")/../.."
K=benchmarks/gpu/resume
case "${1:-}" in
  keep)
    WHAT=${2:?usage: resume_parts.sh keep "what they are"}
    ls -d parts/resume-peagle parts/resume-eagle > /dev/null
    bytes=$(du -sb parts/resume-peagle parts/resume-eagle | awk '{s += $1} END {print s}')
    python3 lab/gpu/history_budget.py --adding $((2 * bytes)) --limit-mib "${HISTORY_LIMIT_MIB:-200}" \
      ${HISTORY_BASE:+--base "$HISTORY_BASE"} || { echo "resume_parts.sh: nothing kept" >&2; exit 1; }
    rm -rf "$K" && mkdir -p "$K" && cp -r parts/resume-peagle parts/resume-eagle "$K/"
    git add -f "$K" && git commit -q -m "carry folders kept in history: $WHAT" -- "$K"
    kept=$(git rev-parse --short HEAD)
    git rm -r -q "$K" && git commit -q -m "carry folders of $kept out of the tree (resume_parts.sh restore $kept)" -- "$K"
    echo "kept in $kept; restore with: bash lab/gpu/resume_parts.sh restore $kept" ;;
  restore)
    REV=${2:-$(git log -1 --format=%h --diff-filter=A -- "$K")}
    [ -n "$REV" ] || { echo "no commit in this history kept carry folders under $K" >&2; exit 1; }
    git cat-file -e "$REV:$K" 2>/dev/null \
      || { echo "$REV holds no $K; commits that do:" >&2; git log --format='  %h %s' --diff-filter=A -- "$K" >&2
           exit 1; }
    T=$(mktemp -d)
    git archive "$REV" "$K" | tar xf - -C "$T"
    mkdir -p parts
    for m in peagle eagle; do
      [ -d "$T/$K/resume-$m" ] && rm -rf "parts/resume-$m" && mv "$T/$K/resume-$m" "parts/resume-$m"
    done
    rm -rf "$T"
    echo "from $(git log -1 --format='%h %s' "$REV"):"
    du -sh parts/resume-* && cat parts/resume-*/resume-*.json ;;
  *)
    echo "usage: resume_parts.sh keep \"what they are\" | restore [COMMIT]" >&2; exit 2 ;;
esac
