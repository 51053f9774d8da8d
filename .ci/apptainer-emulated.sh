#!/usr/bin/env bash
# Apptainer is not installable here, so this checks the generated definitions the closest way we can:
# it carries out what `apptainer build` does with them, with buildah. For the CPU flavour's before.def:
# %files are copied into a container made from the bootstrap image, %post runs there as root with
# /bin/sh, %environment is kept for run time; after.def's %post then runs on the committed result. Then
# the tiny pair runs in them (before must reproduce, after must be fixed), %environment sourced as
# Apptainer's runtime does. Not Apptainer itself: its %files/%post/%environment semantics, emulated.
# Needs the base image .ci/images.sh imports (localhost/repro-bookworm-minbase:ci). ~6 min on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."

driver=${REPRO_BUILDAH_STORAGE:-overlay}
bah=(buildah --storage-driver "$driver")
BASE=localhost/repro-bookworm-minbase:ci
WHEELS=${REPRO_CI_WHEELS:-/opt/wheels}
CA=${REPRO_CI_CA:-/etc/ssl/certs/ca-certificates.crt}
work=$(mktemp -d)
containers=()
cleanup() {
  for c in "${containers[@]}"; do "${bah[@]}" rm "$c" >/dev/null 2>&1 || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# The definitions, as `invoke build --engine apptainer --backend cpu` writes them, with CI's overrides.
.venv/bin/python - "$work" "$BASE" <<'PY'
import sys
from pathlib import Path

from repro.host.images import apptainer, containers

work, base = Path(sys.argv[1]), sys.argv[2]
args = {**containers.FLAVOURS["cpu"], "BASE_IMAGE": base, "TORCH_REQUIREMENT": "torch==2.13.0",
        "TORCH_INDEX_URL": "", "PIP_CERT": "/host-ca/ca-certificates.crt", "PIP_FIND_LINKS": "/host-wheels"}
apptainer.stage_context()
for variant in ("before", "after"):
    text = apptainer.definition(args, variant, before_sif=Path("before.sif"))
    (work / f"{variant}.def").write_text(text)
    header = {k.strip(): v.strip() for k, v in (ln.split(":", 1) for ln in text.splitlines()[0:2])}
    (work / f"{variant}.from").write_text(header["From"])
    sections, name = {}, None
    for line in text.splitlines():
        if line.startswith("%"):
            name = line[1:].strip()
            sections[name] = []
        elif name:
            sections[name].append(line[4:] if line.startswith("    ") else line)
    for name, lines in sections.items():
        (work / f"{variant}.{name}").write_text("\n".join(lines) + "\n")
PY

build() {  # variant, bootstrap image -> committed image
  local variant=$1 from=$2 ctr
  ctr=$("${bah[@]}" from --pull-never "$from")
  containers+=("$ctr")
  if [ -f "$work/$variant.files" ]; then
    while read -r src dest; do
      [ -n "${src:-}" ] || continue
      "${bah[@]}" run --isolation chroot "$ctr" -- mkdir -p "$(dirname "$dest")" < /dev/null
      "${bah[@]}" copy "$ctr" "$src" "$dest" >/dev/null
    done < "$work/$variant.files"
  fi
  "${bah[@]}" copy "$ctr" "$work/$variant.post" /tmp/post.sh >/dev/null
  # Apptainer keeps %environment under /.singularity.d/env/ and sources it at run time.
  "${bah[@]}" run --isolation chroot "$ctr" -- mkdir -p /.singularity.d/env
  if [ -f "$work/$variant.environment" ]; then
    "${bah[@]}" copy "$ctr" "$work/$variant.environment" "/.singularity.d/env/90-$variant.sh" >/dev/null
  fi
  "${bah[@]}" run --isolation chroot --volume "$CA:/host-ca/ca-certificates.crt:ro" \
    --volume "$WHEELS:/host-wheels:ro" "$ctr" -- /bin/sh /tmp/post.sh
  "${bah[@]}" commit -q "$ctr" "localhost/repro-apptainer-emulated:cpu-$variant" >/dev/null
}

t0=$(date +%s)
build before "$(cat "$work/before.from")"
build after localhost/repro-apptainer-emulated:cpu-before
t1=$(date +%s)

out="results/runs/apptainer-emulated-$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"
for variant in before after; do
  ctr=$("${bah[@]}" from --pull-never "localhost/repro-apptainer-emulated:cpu-$variant")
  containers+=("$ctr")
  "${bah[@]}" run --isolation chroot -v "$PWD:/workspace:ro" -v "$PWD/results:/workspace/results:rw" \
    --workingdir /workspace "$ctr" -- /bin/sh -c \
    "for f in /.singularity.d/env/*.sh; do . \"\$f\"; done; python -m repro run --variant $variant --model tiny \
     --out /workspace/$out"
done
.venv/bin/python - "$out" <<'PY'
import json, sys
s = json.load(open(f"{sys.argv[1]}/summary.json"))
assert s["bug_reproduced_before"] and s["fixed_after"] and s["expectation_held"], s["reason"]
print("generated definitions, emulated: before reproduces, after fixed")
PY
echo "emulated build: $((t1 - t0)) s; run directory: $out"
