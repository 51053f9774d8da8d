#!/usr/bin/env bash
# Builds the CPU image's before/after targets with Debian's buildah (vfs storage, chroot isolation),
# overriding only the base image (a debootstrap'd bookworm imported locally: no registry is
# reachable here) and the torch requirement (the local CPU wheel), then runs inside each image,
# through the same invoke tasks a user runs: the tiny before/after reproduction and the upstream
# regression test. Prints image sizes, the after layer's size and the build time.
set -euo pipefail
cd "$(dirname "$0")/.."

export REPRO_BUILDAH_STORAGE=vfs
BASE=localhost/repro-bookworm-minbase:ci
WHEELS=${REPRO_CI_WHEELS:-/opt/wheels}
CA=${REPRO_CI_CA:-/etc/ssl/certs/ca-certificates.crt}
bah=(buildah --storage-driver vfs)

if ! command -v buildah >/dev/null || ! command -v debootstrap >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq buildah debootstrap >/dev/null
fi

# vfs stores every layer as a full copy: a from-scratch build of both images needs ~30 GB.
free_gb=$(df -BG --output=avail /var/lib 2>/dev/null | tail -n 1 | tr -dc 0-9)
if [ "${free_gb:-0}" -lt 30 ]; then
  echo "error: ${free_gb:-?} GB free under /var/lib; buildah's vfs storage needs ~30 GB (buildah rmi --all frees it)" >&2
  exit 2
fi

t0=$(date +%s)
if ! "${bah[@]}" inspect --type image "$BASE" >/dev/null 2>&1; then
  rootfs=$(mktemp -d)
  debootstrap --variant=minbase bookworm "$rootfs" http://deb.debian.org/debian >/dev/null
  tar -C "$rootfs" -cf "$rootfs.tar" .
  ctr=$("${bah[@]}" from scratch)
  "${bah[@]}" add "$ctr" "$rootfs.tar" /
  "${bah[@]}" commit -q "$ctr" "$BASE" >/dev/null
  "${bah[@]}" rm "$ctr" >/dev/null
  rm -rf "$rootfs" "$rootfs.tar"
fi
t1=$(date +%s)

# Host CA bundle and wheel folder at paths of their own, for RUN steps only (mounting over the image's
# own CA file breaks dpkg when ca-certificates installs).
export REPRO_BUILD_VOLUMES="$CA:/host-ca/ca-certificates.crt:ro,$WHEELS:/host-wheels:ro"
.venv/bin/invoke build --backend cpu --engine buildah \
  --build-arg "BASE_IMAGE=$BASE" --build-arg "TORCH_REQUIREMENT=torch==2.13.0" --build-arg "TORCH_INDEX_URL=" \
  --build-arg "PIP_CERT=/host-ca/ca-certificates.crt" --build-arg "PIP_FIND_LINKS=/host-wheels"
t2=$(date +%s)

out="results/runs/ci-images-$(date +%Y%m%d-%H%M%S)"
.venv/bin/invoke repro --backend cpu --engine buildah --model tiny --out "$out"
.venv/bin/python - "$out" <<'PY'
import json, sys
s = json.load(open(f"{sys.argv[1]}/summary.json"))
assert s["bug_reproduced_before"] and s["fixed_after"] and s["expectation_held"], s["reason"]
print("in-image reproduction: before reproduces, after fixed")
PY
# Nothing may compile at container start (the ranks skip DeepSpeed's JIT-built CPU comm op).
if grep -lE "Building extension module|Emitting ninja build file|ninja: " "$out"/*.log; then
  echo "error: a container run JIT-compiled an op (see the logs above)" >&2
  exit 1
fi
echo "in-image runs compiled nothing"
.venv/bin/invoke test --in-image --backend cpu --engine buildah
t3=$(date +%s)

echo "== image facts"
for v in before after; do
  "${bah[@]}" images --format '{{.Name}}:{{.Tag}} {{.Size}}' | grep "cpu-$v" || true
done
"${bah[@]}" inspect --type image --format '{{range .History}}{{.CreatedBy}} | {{end}}' \
  deepspeed-he-zero3-repro:cpu-after | tr '|' '\n' | tail -n 4 | head -n 3 || true
.venv/bin/python .ci/layer_size.py deepspeed-he-zero3-repro:cpu-before deepspeed-he-zero3-repro:cpu-after
echo "base image: $((t1 - t0)) s; image build: $((t2 - t1)) s; in-image runs: $((t3 - t2)) s"
echo "vfs storage: $(du -sh /var/lib/containers/storage 2>/dev/null | cut -f1)"
