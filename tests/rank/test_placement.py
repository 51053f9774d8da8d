"""A rank's device and process group, and the compiled kernels' own math that a cell names."""

import types

import pytest

from repro.rank import cell_probe, placement


def test_the_cpu_talks_gloo_and_a_gpu_nccl_unless_ranks_share_one(monkeypatch):
    monkeypatch.delenv("REPRO_SHARED_GPU", raising=False)
    assert placement.dist_backend("cpu") == "gloo"
    assert placement.dist_backend("rocm") == placement.dist_backend("cuda") == "nccl"
    monkeypatch.setenv("REPRO_SHARED_GPU", "1")  # nccl refuses two ranks on one GPU; gloo carries CUDA tensors
    assert placement.dist_backend("cuda") == "gloo"


def test_a_gpu_rank_whose_deepspeed_accelerator_is_the_cpu_refuses_rather_than_measure_the_cpu():
    assert placement.rank_device("cpu").type == "cpu"  # this machine: DeepSpeed's accelerator is the CPU
    with pytest.raises(RuntimeError, match="accelerator is the CPU"):
        placement.rank_device("cuda")
    with pytest.raises(ValueError, match="backend must be one of"):
        placement.rank_device("tpu")


def test_tanh_gelu_is_named_only_where_a_compiled_mlp_ran_an_exact_gelu_model():
    gelu, relu = types.SimpleNamespace(hidden_act="gelu"), types.SimpleNamespace(activation_function="relu")
    compiled, fallback = {"MLPGemmOp.mlp_gemm_func": "compiled"}, {"MLPGemmOp.mlp_gemm_func": "fallback"}
    assert "tanh-approximate GELU" in cell_probe.approximations(gelu, compiled)[0]
    assert cell_probe.approximations(gelu, fallback) == []  # the fallback computes the exact GELU
    assert cell_probe.approximations(relu, compiled) == []
    gelu_new = types.SimpleNamespace(activation_function="gelu_new")  # GPT-Neo's is tanh already
    assert cell_probe.approximations(gelu_new, {"GELUGemmOp.fused_gemm_gelu": "compiled"}) == []


def test_every_twin_lives_on_the_models_device():
    """The native twins of a GPU run sit on its GPU (the meta device stands in for it): a twin that builds a
    module anew (GPT-NeoX's rotary embedding at base 10000) builds it there."""
    from repro.rank.archs import adapter

    arch = adapter("gpt-neox")
    model = arch.build(1234, {"use_parallel_residual": False, "rotary_emb_base": 500.0, "layer_norm_eps": 1e-6})
    model.to("meta")
    twins = arch.twins(model)
    assert {"parallel_residual", "rotary_base_10000"} <= set(twins)
    for name, twin in twins.items():
        tensors = [*twin.parameters(), *twin.buffers()]
        assert {t.device.type for t in tensors} == {"meta"}, name
