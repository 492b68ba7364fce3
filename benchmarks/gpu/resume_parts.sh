#!/usr/bin/env bash
# Here: the folders that let data_scale.sh continue a run, rebuilt from the repository's history.
#
# A run's last exports (weights, training.json), the sample keys each trainer saved (seen-<method>.pt) and
# resume.json are committed under benchmarks/gpu/resume/ and removed again in the next commit: the history keeps
# them for any later checkout, while the tracked tree, which rides every device call, stays small. Git-ignored
# parts/ does not outlive a fresh checkout, so nothing a continuation needs may live only there.
#
#   bash benchmarks/gpu/resume_parts.sh            # the newest commit that holds benchmarks/gpu/resume/
#   bash benchmarks/gpu/resume_parts.sh COMMIT
#
# Writes parts/resume-peagle/ and parts/resume-eagle/ (each under 31 MB: one device call each, parked with
# PARK_ONLY=1 bash benchmarks/gpu/data_scale.sh); the start call then continues both trainers (--resume).
set -euo pipefail
cd "$(dirname "$0")/../.."
REV=${1:-$(git log -1 --format=%H --diff-filter=A -- benchmarks/gpu/resume/resume.json)}
[ -n "$REV" ] || { echo "no commit holds benchmarks/gpu/resume/resume.json: pass one" >&2; exit 1; }
git cat-file -e "$REV:benchmarks/gpu/resume/resume.json" 2>/dev/null \
  || { echo "$REV holds no benchmarks/gpu/resume/resume.json; pick a commit from:" >&2
       git log --format='  %h %s' -- benchmarks/gpu/resume/resume.json >&2; exit 1; }
T=$(mktemp -d)
git archive "$REV" benchmarks/gpu/resume | tar xf - -C "$T"
R=$T/benchmarks/gpu/resume
rm -rf parts/resume-peagle parts/resume-eagle
for m in peagle eagle; do
  mkdir -p "parts/resume-$m"
  cp "$R/resume.json" "parts/resume-$m/"
  cp -r "$R"/$m-* "parts/resume-$m/"
  [ -f "$R/seen-$m.pt" ] && cp "$R/seen-$m.pt" "parts/resume-$m/"
done
rm -rf "$T"
echo "from $(git log -1 --format='%h %s' "$REV"):"
du -sh parts/resume-peagle parts/resume-eagle
cat parts/resume-peagle/resume.json
