#!/usr/bin/env bash
# How the answers moved: the registry at REF (a commit) and the registry here, each asked for every cell of the
# committed Transformers sweep (its setup: architecture, configuration, ZeRO stage, ranks, scenario, Transformers),
# as released and with the series. Prints how many release x row pairs changed, and which.
#
#   scripts/registry-diff.sh REF        (e.g. a53826c~1: the registry before the sweep)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
ref=${1:?usage: scripts/registry-diff.sh REF (a commit whose registry to compare with this checkout)}
python=${PYTHON:-$repo/.venv/bin/python}
git -C "$repo" rev-parse --verify -q "$ref^{commit}" >/dev/null || { echo "error: $ref is not a commit here" >&2; exit 2; }
work=$(mktemp -d)
trap 'git -C "$repo" worktree remove --force "$work/old" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git -C "$repo" worktree add -q --detach "$work/old" "$ref"
answers='import json, sys
from repro.findings.answer import answer
from repro.findings.setup import Setup
out = {}
for c in json.load(open(sys.argv[1]))["cells"]:
    row = c["arch"] if c["configuration"] == "default" else c["arch"] + " " + c["configuration"]
    key = "|".join(map(str, (c["transformers"], row, c["scenario"], c["zero_stage"], c["world_size"])))
    said = answer(Setup.of_cell(c))
    out[key] = [said.outcome, said.with_series]
json.dump(out, sys.stdout)'
sweep=$repo/results/reference/sweep/sweep.json
(cd "$work/old" && PYTHONPATH="$work/old" "$python" -c "$answers" "$sweep") > "$work/old.json"
(cd "$repo" && "$python" -c "$answers" "$sweep") > "$work/new.json"
"$python" - "$work/old.json" "$work/new.json" "$ref" <<'EOF'
import json, sys
old, new = (json.load(open(p)) for p in sys.argv[1:3])
pairs, moved = set(), {0: {}, 1: {}}
for key in new:
    release, row = key.split("|")[:2]
    pairs.add((release, row))
    for i in (0, 1):
        if key in old and old[key][i] != new[key][i]:
            moved[i].setdefault((row, old[key][i], new[key][i]), set()).add(release)
print(f"{len(pairs)} release x row pairs of the sweep, answered by the registry at {sys.argv[3]} and here:")
for i, build in ((0, "as released"), (1, "with the series")):
    changed = {(release, row) for (row, _, _), releases in moved[i].items() for release in releases}
    print(f"{build}: {len(changed)} pairs changed")
    for (row, before, after), releases in sorted(moved[i].items()):
        order = sorted(releases, key=lambda v: tuple(int(x) for x in v.split(".")))
        print(f"  {row}: {before} -> {after} on {', '.join(order)}")
EOF
