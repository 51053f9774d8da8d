#!/usr/bin/env bash
# Every pull request proven in DeepSpeed 0.19.8's own tree as its CPU workflow runs tests (pytest --forked -n 4,
# DeepSpeed's pytest: scripts/prove-in-deepspeed-tree.sh), one record per pull request in
# results/reference/prs/in-deepspeed-tree-forked-NN.txt. A record already there is kept (pass --replace to run it
# again): nothing run before is overwritten silently.
#
#   scripts/prove-prs-forked.sh [--replace] [NN ...]      (default: every pull request; ~5-8 min each on 2 cores)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$repo/.venv/bin/python}
replace=0
wanted=()
for arg in "$@"; do
  case "$arg" in
    --replace) replace=1 ;;
    [0-9][0-9]) wanted+=("$arg") ;;
    *) echo "usage: scripts/prove-prs-forked.sh [--replace] [NN ...] (NN: a pull request's two digits)" >&2; exit 2 ;;
  esac
done
mirror=${DEEPSPEED_MIRROR:-/work/.mirror/deepspeedai+DeepSpeed/repo}
[ -d "$mirror" ] || { echo "error: no DeepSpeed git directory at $mirror (set DEEPSPEED_MIRROR)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# DeepSpeed 0.19.8's tree with master's tests beside it: what the pull requests are committed on.
(cd "$repo" && "$python" -m repro.host.upstream.pr_forms tree "$mirror" "$work/ds" >/dev/null)
out=$repo/results/reference/prs
for dir in "$repo"/repro/patches/prs/[0-9][0-9]-*/; do
  dir=${dir%/}
  name=$(basename "$dir")
  nn=${name%%-*}
  if [ "${#wanted[@]}" -gt 0 ] && [[ ! " ${wanted[*]} " =~ \ $nn\  ]]; then continue; fi
  record=$out/in-deepspeed-tree-forked-$nn.txt
  if [ -e "$record" ] && [ "$replace" = 0 ]; then
    echo "[forked] $name: kept $record (--replace runs it again)"
    continue
  fi
  # the Transformers its proof runs on (pr_proof: where its end-to-end tests' model is injected), as an overlay
  overlay=$(cd "$repo" && "$python" -c 'import sys
from repro.findings.prs import PRS, directory
from repro.host.envs import transformers_env
from repro.host.upstream.pr_proof import transformers_of
pr = next(p for p in PRS if directory(p) == sys.argv[1])
version = transformers_of(pr)
print(transformers_env.overlay(version) if version else "")' "$name")
  echo "[forked] $name ..."
  started=$(date +%s)
  {
    echo "# scripts/prove-prs-forked.sh $nn ($(date -u +%F), CPU: $(nproc) cores, pytest --forked -n ${PYTEST_WORKERS:-4} with constraints/deepspeed-tests.txt)"
    # which form of the pull request this proves: a later change to its patches makes the record stale
    echo "# patches sha256: $(cat "$dir"/[0-9][0-9][0-9][0-9]-*.patch | sha256sum | cut -d' ' -f1)"
    TRANSFORMERS_OVERLAY=$overlay "$repo/scripts/prove-in-deepspeed-tree.sh" "$work/ds" "$dir" 2>&1 || echo "exit $?"
    echo "# wall: $(( $(date +%s) - started )) s"
  } > "$record.partial"
  mv "$record.partial" "$record"
  grep -E "^the series' tests|^yapf|^flake8|^exit" "$record" | sed "s/^/[forked] $nn /"
done
