"""Where the reproduction runs: container engines (Docker, Podman, Buildah, Apptainer), the exact commands
each runs, and the AMD host checks they need."""
