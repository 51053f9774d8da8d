#!/usr/bin/env bash
# What a new user gets from `pip install .`: a fresh virtualenv, the user's torch first (TORCH_REQUIREMENT, default
# torch==2.13.0, the CPU build on our machines; DeepSpeed builds against the torch it finds), then this package with no
# constraints file, every other dependency as pip resolves pyproject's ranges today; then the main job,
# `python -m repro run --model tiny`, run from outside the source tree, to its verdict. Prints what pip chose and the
# verdict; exit 0 only when the run printed HELD.
#
#   scripts/fresh-install.sh DIR      (DIR must not exist: the virtualenv and the run's output go there)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dest=${1:?usage: scripts/fresh-install.sh DIR (a new directory)}
[ ! -e "$dest" ] || { echo "error: $dest exists; name a new directory (nothing there is overwritten)" >&2; exit 2; }
python=${PYTHON:-python3}
torch_req=${TORCH_REQUIREMENT:-torch==2.13.0}
started=$(date +%s)
"$python" -m venv "$dest/venv"
install() {  # quiet, less the warnings this machine's pip configuration adds for every package
  "$dest/venv/bin/python" -m pip install -q --disable-pip-version-check "$@" 2> >(grep -v '^WARNING: Location' >&2)
}
install "$torch_req"
install "$repo"
echo "installed with: $torch_req, then pip install . (no constraints)"
"$dest/venv/bin/python" -m pip list --disable-pip-version-check 2>/dev/null \
  | awk '{n = tolower($1); gsub("_", "-", n)}
         n ~ /^(torch|deepspeed|transformers|huggingface-hub|tokenizers|safetensors|deepspeed-he-zero3-repro)$/'
mkdir -p "$dest/cwd"
cd "$dest/cwd"  # away from the source tree: the installed package runs, not the checkout
set +e
"$dest/venv/bin/python" -m repro run --model tiny --out "$dest/run" > "$dest/run.log" 2>&1
rc=$?
set -e
grep -E '^\[(before|after)\] (BUG|CORRECT|NOT)|^HELD|^NOT HELD|rror' "$dest/run.log" | tail -n 6
echo "python -m repro run --model tiny: exit $rc ($(( $(date +%s) - started )) s with the installs)"
[ "$rc" = 0 ] && grep -q '^HELD' "$dest/run.log"
