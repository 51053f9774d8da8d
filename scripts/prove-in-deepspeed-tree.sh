#!/usr/bin/env bash
# The upstream series proven the way a maintainer would take it, in a copy of a DeepSpeed checkout (never
# modified): `git am` takes the whole series; every test the series adds fails on the tree as it is (the tests
# copied in alone) and passes with the series, run with the checkout's own tests/conftest.py and
# tests/unit/common.py (DeepSpeed's DistributedTest); yapf and flake8 with the checkout's own config leave every
# file the series touches unchanged.
#
#   scripts/prove-in-deepspeed-tree.sh /path/to/DeepSpeed [PR_DIR]
#
# Without PR_DIR: the whole series, derived from the pull requests for the checkout (repro.host.upstream.series),
# after the pull requests outside it (the fallbacks its end-to-end tests run on, on CPU), on both trees. With
# PR_DIR (repro/patches/prs/NN-slug): one pull request; what it REQUIRES, what only its tests need and the fallbacks
# (as its proof lays them beneath it) are taken first on both trees, so its tests run on the tree with only those
# (they must fail) and with the pull request too (they must pass). The commits are
# committed for 0.19.8's tree (python -m repro.host.upstream.pr_forms tree MASTER DEST makes it); on a checkout of
# another version (version.txt: master), each commit's master form (NN-slug/master/) is taken where it has one. Set
# DS_TESTS="unit/... unit/..." to also run DeepSpeed's own tests of the areas the series touches with the series
# applied (docs/upstream.md lists the CPU set).
# HANG_S (default 900): a forked test still running after that many seconds is killed (pytest-forked counts it failed)
# and the record says so: DeepSpeed's DistributedTest never ends a rank that waits forever.
# TRANSFORMERS_OVERLAY=DIR puts another Transformers first on the tests' path (a `pip install --target` directory:
# repro.host.envs.transformers_env.overlay), where a pull request's end-to-end tests need a model that release injects.
# CPU by default: DS_ACCELERATOR=cpu, and LOCAL_SIZE=2 so that the CPU accelerator offers the two ranks the tests
# ask for. ACCELERATOR=gpu leaves DeepSpeed to find the machine's CUDA or ROCm devices (scripts/gpu-check.sh --pr).
set -euo pipefail
src=${1:?usage: scripts/prove-in-deepspeed-tree.sh /path/to/DeepSpeed-checkout [SERIES_DIR]}
repo=$(cd "$(dirname "$0")/.." && pwd)
series=$(cd "${2:-$repo/repro/patches/prs}" && pwd)
python=${PYTHON:-$repo/.venv/bin/python}
git -C "$src" rev-parse --git-dir >/dev/null 2>&1 || { echo "error: $src is not a git checkout" >&2; exit 2; }
version=$(cat "$src/version.txt" 2>/dev/null || true)
form() {  # the patch files of a pull request directory, each in its form for the checkout's version if it has one
  (cd "$repo" && "$python" -c 'import sys; from pathlib import Path; from repro.host.upstream.pr_files import forms
print("\n".join(map(str, forms(Path(sys.argv[1]), sys.argv[2] or None))))' "$1" "$version")
}
whole=0
[ "$(basename "$series")" = prs ] && whole=1
requires() {  # the pull requests a pull request directory REQUIRES, transitively, in the order they apply
  local need
  [ -f "$1/REQUIRES" ] || return 0
  while read -r need; do
    [ -n "$need" ] || continue
    [ -d "$(dirname "$1")/$need" ] && requires "$(dirname "$1")/$need"
    echo "$(dirname "$1")/$need"
  done < "$1/REQUIRES"
}
patches=()
if [ "$whole" = 0 ]; then
  mapfile -t patches < <(form "$series")
  [ "${#patches[@]}" -gt 0 ] || { echo "error: no NNNN-*.patch in $series" >&2; exit 2; }
fi
mapfile -t required < <(requires "$series" | awk '!seen[$0]++')
if [ "$whole" = 0 ]; then
  # one of our pull requests: also, on both trees, what only its tests need and DeepSpeed's fallbacks completed (the
  # pull requests outside the series), in order, as its proof lays them beneath it (repro.host.upstream.pr_proof)
  mapfile -t beneath < <(cd "$repo" && "$python" -c 'import sys
from repro.findings.prs import PRS, directory
from repro.host.upstream.pr_proof import beneath
pr = next((p for p in PRS if directory(p) == sys.argv[1]), None)
print("\n".join(directory(p) for p in beneath(pr)) if pr else "")' "$(basename "$series")")
  if [ -n "${beneath[0]:-}" ]; then
    required=()
    for name in "${beneath[@]}"; do required+=("$(dirname "$series")/$name"); done
  fi
fi
if [ "$whole" = 1 ]; then
  # the whole series: first, on both trees, what its tests of the injected layers stand on where there is no kernel
  # (the pull requests outside the series: DeepSpeed's PyTorch fallbacks completed), as a pull request's REQUIRES
  mapfile -t required < <(cd "$repo" && "$python" -c 'from repro.findings.prs import OUTSIDE_SERIES, directory
from repro.host.upstream.pr_files import PRS_DIR
print("\n".join(str(PRS_DIR / directory(pr)) for pr in OUTSIDE_SERIES))')
  [ "${#required[@]}" -gt 0 ] || { echo "error: cannot read the pull requests outside the series from $repo" >&2; exit 2; }
fi
for dir in "${required[@]}"; do
  [ -d "$dir" ] || { echo "error: $series requires ${dir##*/}, which is not beside it" >&2; exit 2; }
done
first=()
for dir in "${required[@]}"; do mapfile -t -O "${#first[@]}" first < <(form "$dir"); done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
case "${ACCELERATOR:-cpu}" in
  cpu) export DS_ACCELERATOR=cpu LOCAL_SIZE=${LOCAL_SIZE:-2} ;;
  gpu) unset DS_ACCELERATOR ;;
  *) echo "error: ACCELERATOR is cpu or gpu, not ${ACCELERATOR}" >&2; exit 2 ;;
esac
export PYTHONDONTWRITEBYTECODE=1
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$repo/build/torch-extensions}
# A JIT build killed midway leaves its lock file, and every rank that needs the op then waits for it forever (seen:
# deepspeed_shm_comm's lock after a killed run hung every DistributedTest that came after it).
for lock in "$TORCH_EXTENSIONS_DIR"/*/lock; do
  [ -e "$lock" ] && echo "warning: $lock exists: if no build is running, a killed one left it and every rank will wait for it; remove it" >&2
done

tree() {  # a copy of the checkout's tracked files that DeepSpeed and its tests need, as a git repository
  mkdir -p "$1"
  git -C "$src" archive HEAD deepspeed tests op_builder accelerator csrc version.txt .style.yapf .flake8 \
    2> >(grep -v '^error: invalid object' >&2) | tar -x -C "$1"  # a partial mirror lacks unrelated blobs
  git -C "$1" init -q && git -C "$1" add -A
  git -C "$1" -c user.name=prove -c user.email=prove@localhost commit -q -m "$(git -C "$src" rev-parse HEAD)"
}
tests_of() {  # the test files the series adds
  grep -h '^+++ b/tests/' "${patches[@]}" | sed 's|^+++ b/||' | sort -u
}
# DeepSpeed's test runner (its pytest, pytest-forked, pytest-xdist), beside .venv: constraints/deepspeed-tests.txt
ds_pytest=${DS_PYTEST:-$repo/build/ds-pytest}
if [ ! -f "$ds_pytest/.installed" ]; then
  "$python" -m pip install -q --no-deps --target "$ds_pytest" -r "$repo/constraints/deepspeed-tests.txt" \
    || { echo "error: cannot install DeepSpeed's test runner (constraints/deepspeed-tests.txt) into $ds_pytest" >&2; exit 2; }
  touch "$ds_pytest/.installed"
fi
descendants() {  # every process below $1
  local child
  for child in $(ps -o pid= --ppid "$1"); do echo "$child"; descendants "$child"; done
}
watchdog() {  # $1: seconds. A forked test (pytest-forked's child of an xdist worker, the same command line) older than
  # that is killed with what it started: DeepSpeed's DistributedTest never ends a rank that waits forever (its pool's
  # timeout ends in a join that waits for it); pytest-forked then reports the test as failed. Each kill is logged.
  local pid parent
  while sleep 15; do
    for pid in $(pgrep -f 'exec\(eval\(sys.stdin.readline\(\)\)\)'); do
      parent=$(ps -o ppid= -p "$pid" 2>/dev/null | tr -d ' ')
      [ -n "$parent" ] && [ "$(ps -o cmd= -p "$parent" 2>/dev/null)" = "$(ps -o cmd= -p "$pid" 2>/dev/null)" ] || continue
      [ "$(ps -o etimes= -p "$pid" 2>/dev/null | tr -d ' ')" -gt "$1" ] 2>/dev/null || continue
      echo "watchdog: killed a forked test (pid $pid) still running after $1 s" >> "$work/watchdog.log"
      kill -KILL $(descendants "$pid") "$pid" 2>/dev/null || true
    done
  done
}
run() {  # $1: tree; the summary line, then each test that did not pass. As DeepSpeed's CPU workflow runs its unit
  # tests (cpu-torch-latest.yml: pytest --forked -n 4, DeepSpeed's pytest); PYTEST_WORKERS=0: one process, unforked.
  # One OpenMP thread: a rank forked after a parallel torch op can wait forever in libgomp.
  local out workers=${PYTEST_WORKERS:-4} how=() guard
  [ "$workers" = 0 ] || how=(--forked -n "$workers")
  : > "$work/watchdog.log"
  watchdog "${HANG_S:-900}" &
  guard=$!
  out=$(cd "$1/tests" && OMP_NUM_THREADS=1 PYTHONPATH="${TRANSFORMERS_OVERLAY:+$TRANSFORMERS_OVERLAY:}$ds_pytest:$1:$repo" \
    "$python" -m pytest -q -rfE --color=no \
    -p no:cacheprovider \
    "${how[@]}" "${@:2}" 2>&1 | sed 's/\x1b\[[0-9;]*m//g')
  kill "$guard" 2>/dev/null || true
  echo "$out" | tail -n 1
  echo "$out" | grep -E '^(FAILED|ERROR) ' | sed 's/^/    /' || true
  sed 's/^/    /' "$work/watchdog.log"
}

tree "$work/as-is"
tree "$work/series"
if [ "$whole" = 1 ]; then  # derived on the checkout as it is, before anything is applied
  (cd "$repo" && "$python" -m repro.host.upstream.series "$work/as-is" "$work/derived" >/dev/null) \
    || { echo "error: the series cannot be derived from the pull requests for this checkout" >&2; exit 1; }
  mapfile -t patches < <(ls "$work/derived"/[0-9][0-9][0-9][0-9]-*.patch)
  series="the series derived from $series"
fi
echo "DeepSpeed $(git -C "$src" rev-parse --short HEAD) ($version), $series, Transformers $(cd /tmp && \
  PYTHONPATH="${TRANSFORMERS_OVERLAY:-}" "$python" -c 'import transformers; print(transformers.__version__)' 2>/dev/null)"
if [ "${#first[@]}" -gt 0 ]; then
  echo "first, on both trees, what it requires and what its tests run with: ${required[*]##*/} (${#first[@]} commits)"
  for t in as-is series; do
    git -C "$work/$t" -c user.name=prove -c user.email=prove@localhost am -q "${first[@]}" \
      || { echo "error: git am does not take what $series requires" >&2; exit 1; }
  done
fi
git -C "$work/series" -c user.name=prove -c user.email=prove@localhost am -q "${patches[@]}" \
  || { echo "error: git am does not take the series" >&2; exit 1; }
echo "git am: $(git -C "$work/series" rev-list --count HEAD~${#patches[@]}..HEAD) commits"
mapfile -t added < <(tests_of)
for t in "${added[@]}"; do mkdir -p "$work/as-is/$(dirname "$t")"; cp "$work/series/$t" "$work/as-is/$t"; done
rel=("${added[@]#tests/}")
echo "the series' tests, as it is: $(run "$work/as-is" "${rel[@]}")"
echo "the series' tests, with the series: $(run "$work/series" "${rel[@]}")"
mapfile -t touched < <(git -C "$work/series" diff --name-only "HEAD~${#patches[@]}" HEAD)
(cd "$work/series" && "$python" -m yapf --style .style.yapf --diff "${touched[@]}" >/dev/null) \
  && echo "yapf: clean (${#touched[@]} files)" || echo "yapf: NOT clean"
(cd "$work/series" && "$python" -m flake8 --config=.flake8 "${touched[@]}") \
  && echo "flake8: clean" || echo "flake8: NOT clean"
if [ -n "${DS_TESTS:-}" ]; then
  read -r -a ds_tests <<< "$DS_TESTS"
  echo "DeepSpeed's own tests, as it is: $(run "$work/as-is" "${ds_tests[@]}")"
  echo "DeepSpeed's own tests, with the series: $(run "$work/series" "${ds_tests[@]}")"
fi
