#!/usr/bin/env bash
# Builds the CPU image's before/after targets with Debian's buildah (overlay storage where the kernel allows it, else vfs; chroot isolation),
# overriding only the base image (a debootstrap'd bookworm imported locally: no registry is
# reachable here) and the torch requirement (the local CPU wheel), then runs inside each image,
# through the same invoke tasks a user runs: the tiny before/after reproduction and the upstream
# regression test. Prints image sizes, the after layer's size and the build time.
set -euo pipefail
cd "$(dirname "$0")/.."

BASE=localhost/repro-bookworm-minbase:ci
WHEELS=${REPRO_CI_WHEELS:-/opt/wheels}
CA=${REPRO_CI_CA:-/etc/ssl/certs/ca-certificates.crt}
STORE=/var/lib/containers/storage

# Storage driver. Kernel overlay keeps each layer as a diff (both images: ~6 GB). vfs copies the whole
# root filesystem for every instruction (buildah 1.28 commits a layer even for ARG/ENV/LABEL), so the
# two images need ~45 GB there: on a 60 GB machine it ran out of space (CI, 2026-11-30). Overlay when a
# probe mount works (stores of both drivers coexist under $STORE), else vfs.
driver=vfs
probe=$(mktemp -d)
mkdir -p "$probe/l" "$probe/u" "$probe/w" "$probe/m"
if mount -t overlay overlay -o "lowerdir=$probe/l,upperdir=$probe/u,workdir=$probe/w" "$probe/m" 2>/dev/null; then
  umount "$probe/m"
  driver=overlay
fi
rm -rf "$probe"
export REPRO_BUILDAH_STORAGE=$driver
bah=(buildah --storage-driver "$driver")
echo "buildah storage driver: $driver"

if ! command -v buildah >/dev/null || ! command -v debootstrap >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq buildah debootstrap >/dev/null
fi

need_gb=15
[ "$driver" = vfs ] && need_gb=45
free_gb=$(df -BG --output=avail /var/lib 2>/dev/null | tail -n 1 | tr -dc 0-9)
if [ "${free_gb:-0}" -lt "$need_gb" ]; then
  echo "error: ${free_gb:-?} GB free under /var/lib; buildah's $driver storage needs ~$need_gb GB" \
    "(buildah --storage-driver $driver rmi --all frees it)" >&2
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
echo "$driver storage: $(du -sh "$STORE" 2>/dev/null | cut -f1)"
