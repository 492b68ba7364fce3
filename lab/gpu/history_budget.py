"""How much a submission of this checkout would weigh, before it is too late to make it lighter.

A submission here is every commit made since the checkout started, and it is refused whole when the diffs of
those commits, added up, pass 256 MiB (a file added in one commit and removed in a later one counts twice) or
the commits pack to more than 512 MiB. A refused submission loses everything its session did, GPU results
included: that is how a data-scaling run's 53M regenerated reply tokens and its trained states were lost once
(its packed data, ~106 MB, was added and removed again, so it counted twice).

This script adds up, for every commit between ``--base`` and HEAD, the size of each blob the commit adds, each
it removes, and both sides of each it changes (no rename detection): an upper bound on the diff text, whatever
the files hold. ``--adding BYTES`` counts a change not committed yet (``resume_parts.sh keep`` passes twice the
carry folders' size, because it adds them and removes them again). It exits 1, naming the fix, when the total
would pass ``--limit-mib``.

    python lab/gpu/history_budget.py                 # since this checkout started (the branch's reflog)
    python lab/gpu/history_budget.py --base feade89 --adding 70000000
"""
from __future__ import annotations

import argparse
import subprocess
import sys

LIMIT_MIB = 256            # what one submission's diffs may add up to
MARGIN_MIB = 200           # what this script lets them reach: room for the session's own code and notes
ZERO = "0" * 40


def git(*args: str, cwd: str | None = None, stdin: str | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, input=stdin, capture_output=True, text=True,
                          check=True).stdout


def session_base(cwd: str | None = None) -> str:
    """The commit this checkout's branch started from: the oldest entry of its reflog (``git clone`` and the
    workplace's own checkout both write one)."""
    branch = git("rev-parse", "--abbrev-ref", "HEAD", cwd=cwd).strip()
    entries = git("reflog", "show", "--format=%H", branch, "--", cwd=cwd).split()
    if not entries:
        raise SystemExit(f"the branch {branch} has no reflog here, so where this session started is unknown: "
                         "name it with --base COMMIT")
    return entries[-1]


def blob_sizes(blobs: set[str], cwd: str | None = None) -> dict[str, int]:
    if not blobs:
        return {}
    out = git("cat-file", "--batch-check=%(objectname) %(objectsize)", cwd=cwd, stdin="\n".join(sorted(blobs)) + "\n")
    return {name: int(size) for name, size in (line.split() for line in out.splitlines() if "missing" not in line)}


def commit_changes(base: str, head: str = "HEAD", cwd: str | None = None) -> list[tuple[str, str, str, str]]:
    """(commit, old blob, new blob, path) for every file every commit in base..head changes, against its first
    parent; a side that does not exist is forty zeros."""
    changes = []
    for commit in git("rev-list", "--no-merges", f"{base}..{head}", cwd=cwd).split():
        raw = git("diff-tree", "-r", "--root", "--no-renames", "--no-commit-id", commit, cwd=cwd)
        for line in raw.splitlines():
            meta, path = line.split("\t", 1)
            _, _, old, new, _ = meta.split()
            changes.append((commit, old, new, path))
    return changes


def diff_bytes(base: str, head: str = "HEAD", cwd: str | None = None) -> tuple[int, list[tuple[int, str, str]]]:
    """The upper bound on base..head's diff text, and its largest parts as (bytes, commit, path), largest first."""
    changes = commit_changes(base, head, cwd)
    sizes = blob_sizes({b for _, old, new, _ in changes for b in (old, new) if b != ZERO}, cwd)
    parts = [(sizes.get(old, 0) + sizes.get(new, 0), commit[:7], path) for commit, old, new, path in changes]
    return sum(p[0] for p in parts), sorted(parts, reverse=True)


def check(base: str, adding: int = 0, limit_mib: float = MARGIN_MIB, cwd: str | None = None) -> tuple[bool, str]:
    total, parts = diff_bytes(base, cwd=cwd)
    after = total + adding
    lines = [f"diffs since {base[:7]}: {total / 2**20:.1f} MiB committed"
             + (f" + {adding / 2**20:.1f} MiB about to be" if adding else "")
             + f" = {after / 2**20:.1f} MiB (allowed here: {limit_mib:.0f} MiB; a submission: {LIMIT_MIB} MiB)"]
    lines += [f"  {b / 2**20:8.1f} MiB  {c}  {p}" for b, c, p in parts[:5] if b >= 2**20]
    ok = after <= limit_mib * 2**20
    if not ok:
        lines.append("too heavy to submit: keep only what no script can make again (carry folders, results JSON), "
                     "never regenerated data or wheels; a file added and removed counts twice. To drop a commit "
                     "made here, rewrite the branch from before it (git rebase -i) before the session stops.")
    return ok, "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default=None, help="the commit the submission starts after (default: where this "
                    "checkout's branch started, from its reflog)")
    ap.add_argument("--adding", type=int, default=0, help="bytes of diff not committed yet")
    ap.add_argument("--limit-mib", type=float, default=MARGIN_MIB)
    args = ap.parse_args(argv)
    if args.adding < 0 or args.limit_mib <= 0:
        ap.error("--adding must be >= 0 and --limit-mib > 0")
    base = args.base or session_base()
    try:
        git("rev-parse", "--verify", "--quiet", f"{base}^{{commit}}")
    except subprocess.CalledProcessError:
        ap.error(f"--base {base} is no commit of this repository")
    ok, report = check(base, args.adding, args.limit_mib)
    print(report, file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
