"""The committed records of scripts/prove-prs-forked.sh (each pull request in DeepSpeed 0.19.8's tree, its tests run as
DeepSpeed's CPU workflow runs them: pytest --forked -n 4) say what a maintainer needs: the tests fail on the tree as it
is and pass with the pull request, yapf and flake8 leave its files alone, and it ran on the Transformers its proof
runs on (pr_proof.transformers_of)."""

import re
from pathlib import Path

import pytest

from repro.findings.prs import PRS, directory
from repro.host.envs import transformers_env
from repro.host.upstream.pr_proof import transformers_of

ROOT = Path(__file__).resolve().parents[3]
RECORDS = sorted((ROOT / "results/reference/prs").glob("in-deepspeed-tree-forked-[0-9][0-9].txt"))


def summary(record: str, which: str) -> str:
    found = re.search(rf"^the series' tests, {which}: (.*)$", record, re.MULTILINE)
    assert found, f"no '{which}' line"
    return found.group(1)


def test_there_are_records():
    assert len(RECORDS) >= 1


# Records whose run did not conclude, each saying why in a `# inconclusive:` line (a test that hung under DeepSpeed's
# own DistributedTest here); their failures are exactly the tests that line names.
INCONCLUSIVE: dict[str, set[str]] = {}


@pytest.mark.parametrize("path", RECORDS, ids=[p.stem.rsplit("-", 1)[1] for p in RECORDS])
def test_each_record_goes_red_to_green_clean(path):
    record = path.read_text()
    number = path.stem.rsplit("-", 1)[1]
    assert re.search(r"\d+ failed", summary(record, "as it is")), "its tests do not fail on the tree as it is"
    green = summary(record, "with the series")
    assert re.search(r"\d+ passed", green), green
    tail = record.split("the series' tests, with the series:", 1)[1].split("yapf:", 1)[0]
    failed = {line.split("::", 1)[1] for line in tail.splitlines() if line.strip().startswith(("FAILED", "ERROR"))}
    assert failed == INCONCLUSIVE.get(number, set()), failed
    assert ("# inconclusive:" in record) == (number in INCONCLUSIVE)
    assert "yapf: clean" in record and "flake8: clean" in record and "\nexit " not in record


@pytest.mark.parametrize("path", [p for p in RECORDS if "Transformers " in p.read_text()],
                         ids=lambda p: p.stem.rsplit("-", 1)[1])  # fmt: skip
def test_each_record_ran_on_the_transformers_its_proof_runs_on(path):
    number = path.stem.rsplit("-", 1)[1]
    pr = next(p for p in PRS if directory(p).startswith(number + "-"))
    ran = re.search(r"^DeepSpeed .*, Transformers (\S+)$", path.read_text(), re.MULTILINE).group(1)
    assert ran == (transformers_of(pr) or transformers_env.pinned())


# Records written before the script named the patches it proved (2026-12-07); each of these pull requests' patches
# is unchanged since its record was made (git log of its directory), except where the record is run again.
BEFORE_PATCH_HASHES = {"01", "02", "03", "04", "06", "07", "08", "09", "10", "11", "24", "28", "29"}


def patches_sha256(number: str) -> str:
    import hashlib

    pr_dir = next((ROOT / "repro/patches/prs").glob(f"{number}-*"))
    return hashlib.sha256(
        b"".join(p.read_bytes() for p in sorted(pr_dir.glob("[0-9][0-9][0-9][0-9]-*.patch")))
    ).hexdigest()


@pytest.mark.parametrize("path", RECORDS, ids=[p.stem.rsplit("-", 1)[1] for p in RECORDS])
def test_each_record_proves_the_pull_request_as_committed(path):
    number = path.stem.rsplit("-", 1)[1]
    found = re.search(r"^# patches sha256: ([0-9a-f]{64})$", path.read_text(), re.MULTILINE)
    if number in BEFORE_PATCH_HASHES:
        assert found is None, f"{number} names its patches now: take it out of BEFORE_PATCH_HASHES"
        return
    assert found, "the record does not say which patches it proved"
    assert found.group(1) == patches_sha256(number), "the patches changed since: scripts/prove-prs-forked.sh --replace"


def test_the_patch_hash_is_the_scripts():
    # the script hashes the patch files concatenated in glob order, as patches_sha256 does
    script = (ROOT / "scripts/prove-prs-forked.sh").read_text()
    assert 'cat "$dir"/[0-9][0-9][0-9][0-9]-*.patch | sha256sum' in script
