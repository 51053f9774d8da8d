#!/usr/bin/env bash
# The upstream series lives as commits on a branch of a DeepSpeed checkout; repro/patches is its export.
#
#   scripts/series.sh apply DS_CHECKOUT [SERIES_DIR]
#       a branch hybrid-engine-fixes at the checkout's HEAD, with the series taken by `git am`
#       (SERIES_DIR: repro/patches, the series for master; repro/patches/<version> for a release)
#   scripts/series.sh export DS_CHECKOUT BASE [SERIES_DIR]
#       BASE..HEAD of the checkout as the series: `git format-patch` into SERIES_DIR (replacing its patches),
#       and each test a commit adds copied to tests/upstream/ (which mirrors DeepSpeed's tests/), so our suite
#       runs what the series carries. Edit the series on the branch (git rebase -i), then export it.
#
# The commits carry no Signed-off-by: whoever submits them adds their own (git am -s, or git rebase --signoff).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
usage() { sed -n '3,10p' "$0" >&2; exit 2; }
[ $# -ge 2 ] || usage
cmd=$1 src=$2
git -C "$src" rev-parse --git-dir >/dev/null 2>&1 || { echo "error: $src is not a git checkout" >&2; exit 2; }
case "$cmd" in
  apply)
    series=${3:-$repo/repro/patches}
    git -C "$src" checkout -q -b hybrid-engine-fixes
    git -C "$src" am -q "$series"/[0-9][0-9][0-9][0-9]-*.patch
    git -C "$src" log --oneline "HEAD~$(ls "$series"/[0-9][0-9][0-9][0-9]-*.patch | wc -l)..HEAD"
    ;;
  export)
    [ $# -ge 3 ] || usage
    base=$3 series=${4:-$repo/repro/patches}
    mkdir -p "$series"
    series=$(cd "$series" && pwd)  # format-patch runs in the checkout: a relative SERIES_DIR would land there
    rm -f "$series"/[0-9][0-9][0-9][0-9]-*.patch
    # Numbered from 0000 in the file names (0000 is the GPT-NeoX prerequisite; 0001 is PR #8392's fix), and
    # "[PATCH]" subjects, since "[PATCH 00/11]" reads as a cover letter.
    git -C "$src" format-patch -q -N --zero-commit --no-signature --start-number 0 -o "$series" "$base..HEAD"
    git -C "$src" diff --name-only --diff-filter=A "$base" HEAD -- tests/ | while read -r t; do
      mkdir -p "$repo/tests/upstream/$(dirname "${t#tests/}")"
      git -C "$src" show "HEAD:$t" > "$repo/tests/upstream/${t#tests/}"
    done
    ls "$series"
    ;;
  *) usage ;;
esac
