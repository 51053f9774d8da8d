"""Prints what the `after` image adds: the size of its patch layer (its last layer, made by the
after stage's one RUN step) and how many layers it does not share with the `before` tag."""

import json
import os
import subprocess
import sys


def inspect(image: str) -> dict:
    out = subprocess.run(
        [
            "buildah",
            "--storage-driver",
            os.environ.get("REPRO_BUILDAH_STORAGE", "vfs"),
            "inspect",
            "--type",
            "image",
            image,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out)


before, after = inspect(sys.argv[1]), inspect(sys.argv[2])
layers = json.loads(after["Manifest"])["layers"]
history = [h for h in after["History"] if not h.get("empty_layer")]
last_step = history[-1].get("created_by", "?")
shared = {layer["digest"] for layer in json.loads(before["Manifest"])["layers"]}
unshared = [layer["size"] for layer in layers if layer["digest"] not in shared]
print(
    f"{sys.argv[2]}: patch layer {layers[-1]['size']} bytes ({layers[-1]['size'] / 1024:.1f} KiB), made by: "
    f"{last_step[:120]}"
)
print(
    f"layers not shared with the {sys.argv[1]} tag: {len(unshared)}, {sum(unshared)} bytes "
    "(buildah may re-commit the before stage's top layer when it builds the after target)"
)
