"""A fixed DeepSpeed to install: the wheel carries exactly the patches asked for (and those they need), says so
in its version, and a refusal writes nothing. The full proof (a fresh virtualenv, every issue script OK) is
`python -m repro patched-deepspeed --out DIR --prove`, committed in results/reference/patched-deepspeed/."""

import json
import zipfile

import pytest

from repro import findings, results
from repro.fixstatus import fix_status_of_package, is_fixed
from repro.host.upstream import patched_wheel
from repro.options import UsageError


def test_a_finding_brings_the_patches_it_needs_in_series_order():
    assert patched_wheel.closure(("qkv-transform-idempotent",)) == ("0001", "0002", "0004")
    assert patched_wheel.closure(("zero3-qkv-layout",)) == ("0001",)
    with pytest.raises(UsageError, match="no finding 'nope'"):
        patched_wheel.closure(("nope",))


def test_the_version_says_what_the_wheel_carries():
    assert patched_wheel.local_version(findings.SERIES) == f"+he{len(findings.SERIES)}"
    assert patched_wheel.local_version(("0001", "0004")) == "+he.1.4"
    all_but = tuple(p for p in findings.SERIES if p not in ("0024", "0035"))
    assert patched_wheel.local_version(all_but) == f"+he{len(findings.SERIES)}.without.24.35"  # readable in pip list


@pytest.mark.proof
def test_a_wheel_with_one_fix_has_it_and_only_it(tmp_path):
    out = tmp_path / "wheel"
    wheel = patched_wheel.build(out, ("zero3-qkv-layout",), log=lambda _: None)
    manifest = json.loads((out / patched_wheel.MANIFEST).read_text())
    assert manifest["patches"] == ["0001"] and manifest["version"] == "0.19.8+he.1.fallbacks"
    assert manifest["prs"] == ["01-inference-fallbacks", "27-fallbacks-without-op"]  # the fallbacks ride with any fix
    assert wheel.name == "deepspeed-0.19.8+he.1.fallbacks-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(tmp_path / "site", [n for n in z.namelist() if n.startswith("deepspeed/")])
    assert is_fixed(fix_status_of_package(tmp_path / "site" / "deepspeed"))
    linear = (tmp_path / "site/deepspeed/ops/transformer/inference/op_binding/linear.py").read_text()
    assert "def linear_fallback" in linear and "return output + bias if add_bias else output" in linear
    idempotent = (tmp_path / "site/deepspeed/module_inject/containers/features/hybrid_megatron.py").read_text()
    assert "_qkv_inference_layout" not in idempotent  # 0002's record: not asked for, not carried
    # one commit builds one wheel, byte for byte, as the manifest says
    again = patched_wheel.build(tmp_path / "again", ("zero3-qkv-layout",), log=lambda _: None)
    assert again.read_bytes() == wheel.read_bytes() and "compare" in manifest["reproducible"]


def test_a_directory_that_holds_anything_is_refused_untouched(tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(UsageError, match="not empty"):
        patched_wheel.build(tmp_path, log=lambda _: None)
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def test_the_committed_proof_shows_every_issue_script_ok_on_the_whole_series():
    proof = results.load(results.WHEEL_PROOF)
    assert proof["version"] == f"0.19.8+he{len(findings.SERIES)}.fallbacks"
    assert proof["evidence"].endswith("no stand-in")  # the wheel's own fallbacks ran, as on a user's CPU
    scripts = {(s.name, s.transformers) for s in patched_wheel_scripts()}
    assert len(proof["runs"]) == len(scripts) and all(r["verdict"] == "ok" for r in proof["runs"])


def patched_wheel_scripts():
    from repro.host.upstream.affected_releases import invocations

    return [inv.script for inv in invocations()]
