"""What a conformance run is evidence of, as the reports and issue texts say it."""

from repro.host.conformance import evidence

CUDA = {"backend": "cuda", "evidence": "CUDA", "devices": ["NVIDIA H200", "NVIDIA H200"], "torch": "2.9.1+cu128",
        "gpu_runtime": "CUDA 12.8"}  # fmt: skip
ROCM = {**CUDA, "backend": "rocm", "evidence": "ROCm", "devices": ["AMD Instinct MI300X"] * 2,
        "gpu_runtime": "HIP 6.4"}  # fmt: skip


def test_a_run_says_which_evidence_it_is_and_which_it_is_not():
    assert evidence.label({}) == "CPU evidence"  # a JSON from before the backend option
    assert evidence.scope({}).startswith("CPU evidence, not GPU or AMD evidence: gloo, DeepSpeed's PyTorch fallbacks")
    cuda = evidence.scope({"evidence": CUDA})
    assert evidence.label({"evidence": CUDA}) == "CUDA evidence"
    assert cuda.startswith("CUDA evidence, not CPU evidence, not AMD evidence: NVIDIA H200 (2 ranks, one GPU each)")
    assert "compiled kernels" in cuda and "CUDA 12.8" in cuda
    rocm = evidence.scope({"evidence": ROCM})
    assert rocm.startswith("ROCm evidence, not CPU evidence: AMD Instinct MI300X") and "HIP 6.4" in rocm
    assert evidence.ds_report_command({}) == "DS_ACCELERATOR=cpu ds_report"
    assert evidence.ds_report_command({"evidence": ROCM}) == "DS_ACCELERATOR=cuda ds_report"
    assert "CPU only" in evidence.system_info({}, "3.11", "2.13", "4.57.6", "0.19.8")[0]
    gpu = evidence.system_info({"evidence": ROCM}, "3.11", "2.9.1", "4.57.6", "0.19.8")
    assert gpu[0].startswith("- AMD Instinct MI300X; HIP 6.4;") and "nccl" in gpu[1] and "CPU" not in " ".join(gpu)


def test_kernels_count_each_ops_path_and_name_the_compiled_kernels_own_math():
    approx = "the compiled MLP applies tanh-approximate GELU"
    cells = [
        {"kernel_paths": {"MLPGemmOp.mlp_gemm_func": "compiled", "SoftmaxContextOp.softmax_context_func": "compiled"},
         "approximations": [approx]},
        {"kernel_paths": {"MLPGemmOp.mlp_gemm_func": "fallback"}, "approximations": []},
        {"kernel_paths": {}},  # generate never reached the injected layers
    ]  # fmt: skip
    line = evidence.kernels(cells)
    assert "`MLPGemmOp.mlp_gemm_func` compiled in 1, fallback in 1" in line
    assert "`SoftmaxContextOp.softmax_context_func` compiled in 1" in line and f"In 1 cells {approx}" in line
    assert "not recorded" in evidence.kernels([{"diagnosis": ["correct"]}])
    assert "none ran" in evidence.kernels([{"kernel_paths": {}}])
