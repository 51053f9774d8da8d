"""Prints the size of the layers an image adds over its parent image (buildah, vfs storage)."""

import json
import subprocess
import sys


def layers(image: str) -> list[tuple[str, int]]:
    out = subprocess.run(
        ["buildah", "--storage-driver", "vfs", "inspect", "--type", "image", image],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    manifest = json.loads(json.loads(out)["Manifest"])
    return [(layer["digest"], layer.get("size", 0)) for layer in manifest["layers"]]


parent, child = layers(sys.argv[1]), layers(sys.argv[2])
added = [size for digest, size in child if digest not in {d for d, _ in parent}]
print(f"{sys.argv[2]} adds {len(added)} layer(s) over {sys.argv[1]}: {sum(added)} bytes ({sum(added) / 1024:.1f} KiB)")
