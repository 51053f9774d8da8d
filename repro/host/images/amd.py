"""What an AMD host (or a container on one) shows of its GPUs, read from /dev and /sys only, so a
missing device, a group the process lacks or an unsupported GPU is named before anything starts.
No torch here: the same answers serve `invoke doctor` on the host and the refusal inside an image."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

KFD = Path("/dev/kfd")
DRI = Path("/dev/dri")
KFD_TOPOLOGY = Path("/sys/class/kfd/kfd/topology/nodes")
AMDGPU_VERSION = Path("/sys/module/amdgpu/version")
# The ROCm image's offload targets (docker/Dockerfile PYTORCH_ROCM_ARCH): MI250/MI250X and MI300X/MI300A.
IMAGE_ARCHS = ("gfx90a", "gfx942")
ROCM_RELEASE = "6.4.1"


@dataclass
class DeviceNode:
    path: str
    gid: int
    accessible: bool


def device_nodes(kfd: Path = KFD, dri: Path = DRI) -> list[DeviceNode]:
    """/dev/kfd and every /dev/dri/renderD*, with the numeric group that owns each."""
    nodes = [kfd] if kfd.exists() else []
    nodes += sorted(dri.glob("renderD*")) if dri.exists() else []
    return [DeviceNode(str(n), n.stat().st_gid, os.access(n, os.R_OK | os.W_OK)) for n in nodes]


def group_ids(nodes: list[DeviceNode]) -> list[int]:
    """The host's numeric group ids a container needs (`--group-add`), from `stat`, never from names:
    the image's /etc/group does not know the host's `render` gid."""
    return sorted({n.gid for n in nodes if n.gid != 0})


def render_nodes(nodes: list[DeviceNode]) -> list[DeviceNode]:
    return [n for n in nodes if "renderD" in n.path]


def gfx_name(target_version: int) -> str:
    """KFD's gfx_target_version (e.g. 90010) as an LLVM target name (gfx90a): major, minor, stepping,
    the last two printed in hex."""
    major, minor, stepping = target_version // 10000, (target_version // 100) % 100, target_version % 100
    return f"gfx{major}{minor:x}{stepping:x}"


def gfx_archs(topology: Path = KFD_TOPOLOGY) -> list[str]:
    """One entry per GPU agent the kernel driver reports (CPU nodes report 0 and are skipped)."""
    archs = []
    for props in sorted(topology.glob("*/properties")) if topology.exists() else []:
        for line in props.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "gfx_target_version" and value.strip().isdigit() and int(value) > 0:
                archs.append(gfx_name(int(value)))
    return archs


def driver_version(path: Path = AMDGPU_VERSION) -> str | None:
    """The amdgpu-dkms module's version; None for the kernel's in-box amdgpu (no version file)."""
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def why_no_gpu(hip_visible: str | None = None, nodes: list[DeviceNode] | None = None) -> str:
    """One line naming what keeps torch from seeing an AMD GPU here, most basic cause first."""
    nodes = device_nodes() if nodes is None else nodes
    hip_visible = os.environ.get("HIP_VISIBLE_DEVICES") if hip_visible is None else hip_visible
    if not any(n.path.endswith("kfd") for n in nodes):
        return (
            "/dev/kfd is missing (host: amdgpu driver not loaded; container: add --device /dev/kfd --device /dev/dri)"
        )
    if not render_nodes(nodes):
        return "no /dev/dri/renderD* node (container: add --device /dev/dri)"
    denied = [n for n in nodes if not n.accessible]
    if denied:
        gids = ", ".join(sorted({str(n.gid) for n in denied}))
        return (
            f"this process (uid {os.getuid()}, groups {','.join(map(str, os.getgroups())) or 'none'}) cannot open "
            f"{', '.join(n.path for n in denied)}: add the owning group id(s) {gids} (container: --group-add {gids})"
        )
    if hip_visible is not None and hip_visible.strip() in ("", "-1"):
        return f"HIP_VISIBLE_DEVICES={hip_visible!r} hides every GPU"
    if hip_visible:
        return (
            f"the devices are present and open, but torch sees no GPU with HIP_VISIBLE_DEVICES={hip_visible}: "
            f"check the indices against the {len(render_nodes(nodes))} render node(s), and that torch is a ROCm build"
        )
    return "the devices are present and open, but torch sees no GPU: is torch a ROCm build (torch.version.hip)?"
