#!/usr/bin/env bash
# Idempotent set-up of .venv with the pinned stack (constraints/pinned.txt); a second run costs ~1 s.
# TORCH_REQUIREMENT picks the torch build (default torch==2.13.0, the CPU build on our machines;
# elsewhere e.g. TORCH_REQUIREMENT=torch==2.9.1 PIP_INDEX_URL=https://download.pytorch.org/whl/cpu).
#
#   scripts/bootstrap.sh          everything: local runs and the test suite
#   scripts/bootstrap.sh --host   an AMD host that runs the containers: invoke, the host-side code and
#                                 what it imports (no torch, DeepSpeed or Transformers; the images carry them)
set -euo pipefail
cd "$(dirname "$0")/.."

mode=full
case "${1:-}" in
  "") ;;
  --host) mode=host ;;
  *) echo "usage: scripts/bootstrap.sh [--host]" >&2; exit 2 ;;
esac

python=${PYTHON:-python3}
torch_req=${TORCH_REQUIREMENT:-torch==2.13.0}
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
  echo "error: Python >= 3.10 is required ($python is $("$python" --version 2>&1)); set PYTHON=..." >&2
  exit 2
fi

key=$(cat constraints/pinned.txt pyproject.toml scripts/bootstrap.sh | sha256sum | cut -c1-16)
stamp=".venv/.bootstrap-${mode}-${key}-$(echo "$torch_req" | tr -c 'A-Za-z0-9.=+' _)"
if [ -f "$stamp" ]; then
  exit 0
fi

if [ "$mode" = host ]; then
  echo "bootstrap: creating .venv for the host side only (no torch)" >&2
  "$python" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -c constraints/pinned.txt --no-deps -e .
  .venv/bin/python -m pip install -q -c constraints/pinned.txt invoke matplotlib huggingface-hub
  rm -f .venv/.bootstrap-*
  touch "$stamp"
  echo "bootstrap: done (host side: invoke doctor, invoke build, invoke repro with an engine)" >&2
  exit 0
fi

echo "bootstrap: creating .venv ($torch_req, constraints/pinned.txt)" >&2
"$python" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "$torch_req"
# Pin the torch just installed, so nothing below can swap it for another build.
torch_pin=$(mktemp)
trap 'rm -f "$torch_pin"' EXIT
.venv/bin/python -c 'import torch; print(f"torch=={torch.__version__}")' > "$torch_pin"
.venv/bin/python -m pip install -q -c constraints/pinned.txt -c "$torch_pin" -e '.[test]'
rm -f .venv/.bootstrap-*
touch "$stamp"
echo "bootstrap: done" >&2
