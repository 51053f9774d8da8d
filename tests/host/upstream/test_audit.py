import textwrap

from repro import fixstatus
from repro.host.upstream import audit, patched_copy


def _sites(findings):
    return {(f.file, f.function) for f in findings}


def test_installed_deepspeed_lists_both_transforms_and_the_lora_candidate():
    package_dir, _ = fixstatus.installed_deepspeed()
    sites = _sites(audit.scan(package_dir))
    hm = "deepspeed/module_inject/containers/features/hybrid_megatron.py"
    assert {(hm, "transform_for_inference"), (hm, "transform_for_training")} <= sites
    assert ("deepspeed/runtime/hybrid_engine.py", "unfuse_lora_weight_non_pinned") in sites


def test_every_site_in_the_installed_deepspeed_is_settled():
    package_dir, _ = fixstatus.installed_deepspeed()
    unsettled = [f"{f.file}:{f.line} {f.function}" for f in audit.scan(package_dir) if not f.known]
    assert unsettled == []


def test_with_every_patch_no_confirmed_site_remains():
    root = patched_copy.prepare_patched_copy(patches=("0001", "0002", "0003"))
    found = {f.function: f.known for f in audit.scan(root / "deepspeed")}
    assert [function for function, known in found.items() if known and known.startswith("confirmed")] == []
    # the fixed run_forward still writes into a gather without modifier_rank, on purpose, and is said so
    assert found["run_forward"].startswith("false positive (patch 0003, by design)")


def test_patched_copy_no_longer_lists_the_transforms():
    sites = _sites(audit.scan(patched_copy.prepare_patched_copy() / "deepspeed"))
    assert not any(function.startswith("transform_for_") for _, function in sites)


def test_write_kinds_and_modifier_rank_forms(tmp_path):
    (tmp_path / "m.py").write_text(
        textwrap.dedent("""
        def helper(p):
            p.data += 1

        def direct(p):
            with GatheredParameters([p]):
                p.data.copy_(p.data * 2)

        def via_helper(p):
            with GatheredParameters([p], modifier_rank=None):
                helper(p)

        def assigned(p):
            with zero.GatheredParameters([p]):
                p.data = p.data * 2

        def fine(p):
            with GatheredParameters([p], modifier_rank=0):
                p.data.copy_(p.data * 2)

        def positional(p):
            with GatheredParameters([p], 0):
                p.data.copy_(p.data * 2)

        def read_only(p):
            with GatheredParameters([p]):
                print(p.data.sum())
    """)
    )
    found = {f.function: f for f in audit.scan(tmp_path)}
    assert set(found) == {"direct", "via_helper", "assigned"}
    assert found["direct"].line == 6 and "copy_" in found["direct"].writes[0]
    assert "calls helper()" in found["via_helper"].writes[0]
