#!/usr/bin/env bash
# The pull requests (repro/patches/prs/NN-slug/, for DeepSpeed 0.19.8, with master forms in NN-slug/master/) are the
# only committed form of the patches; the linear series is derived from them (repro.host.upstream.series).
#
#   scripts/series.sh apply DS_CHECKOUT
#       a branch hybrid-engine-fixes at the checkout's HEAD, with the whole series derived for it taken by `git am`
#   scripts/series.sh export DS_CHECKOUT BASE PR_DIR
#       BASE..HEAD of the checkout as one pull request's commits: `git format-patch` into PR_DIR (replacing its
#       patches), and each test a commit adds copied to tests/upstream/ (which mirrors DeepSpeed's tests/), so our
#       suite runs what the pull request carries. Edit the commits on a branch of DeepSpeed 0.19.8's tree (pr_forms
#       tree makes it; pr_submit makes the branch, git rebase -i), export them, then write their master forms
#       (python -m repro.host.upstream.pr_forms master MASTER_CHECKOUT RELEASE_CHECKOUT --only SLUG).
#
# The commits carry no Signed-off-by: whoever submits them adds their own (python -m repro.host.upstream.pr_submit).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$repo/.venv/bin/python}
usage() { sed -n '4,12p' "$0" >&2; exit 2; }
[ $# -ge 2 ] || usage
cmd=$1 src=$2
git -C "$src" rev-parse --git-dir >/dev/null 2>&1 || { echo "error: $src is not a git checkout" >&2; exit 2; }
case "$cmd" in
  apply)
    if git -C "$src" rev-parse -q --verify refs/heads/hybrid-engine-fixes >/dev/null; then
      echo "error: $src already has a branch hybrid-engine-fixes; delete or rename it first" >&2
      exit 2
    fi
    derived=$(mktemp -d)
    trap 'rm -rf "$derived"' EXIT
    (cd "$repo" && "$python" -m repro.host.upstream.series "$(cd "$src" && pwd)" "$derived" >/dev/null)
    git -C "$src" checkout -q -b hybrid-engine-fixes
    git -C "$src" am -q "$derived"/[0-9][0-9][0-9][0-9]-*.patch
    git -C "$src" log --oneline "HEAD~$(ls "$derived"/[0-9][0-9][0-9][0-9]-*.patch | wc -l)..HEAD"
    ;;
  export)
    [ $# -ge 4 ] || usage
    base=$3
    dest=$(cd "$4" && pwd)  # format-patch runs in the checkout: a relative PR_DIR would land there
    [ -f "$dest/PR.md" ] || { echo "error: $4 is not a pull request directory (no PR.md)" >&2; exit 2; }
    rm -f "$dest"/[0-9][0-9][0-9][0-9]-*.patch
    git -C "$src" format-patch -q -N --zero-commit --no-signature -o "$dest" "$base..HEAD"
    git -C "$src" diff --name-only --diff-filter=A "$base" HEAD -- tests/ | while read -r t; do
      mkdir -p "$repo/tests/upstream/$(dirname "${t#tests/}")"
      git -C "$src" show "HEAD:$t" > "$repo/tests/upstream/${t#tests/}"
    done
    ls "$dest"
    ;;
  *) usage ;;
esac
