"""The kernel classification table: kernel names as JAX's and PyTorch's traces give them (XLA fusions, cuBLAS,
cuDNN, CUTLASS, Pallas, mamba-ssm's CUDA and Triton kernels, ATen) land in the paper's categories; the name scope
refines only XLA's generic fusions, and the language models' compiled steps carry the scopes it reads; nothing
unknown is hidden."""

import pytest

from compare.characterize.kernel_classes import CATEGORIES, UNCLASSIFIED, breakdown, classify
from compare.characterize.step_profile import compile_step
from jax_mamba.configs import load_config
from jax_mamba.tasks import task_for
from jax_mamba.train.step import init_training

NAMED = [
    # GEMM: cuBLAS / cuBLASLt / CUTLASS / XLA's Triton GEMM fusions
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off", "GEMM"),
    ("nvjet_tst_192x192_64x3_1x2_h_bz_coopA_TNN", "GEMM"),
    ("cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x256x64_1x2x1_0_tnn_align8_warpspecialized", "GEMM"),
    ("gemm_fusion_dot_general_729", "GEMM"),
    ("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn", "GEMM"),
    # SSM: our Pallas kernels and mamba-ssm's
    ("selective_scan_bwd", "SSM"),
    ("ssd_fwd_out", "SSM"),
    (
        "void selective_scan_fwd_kernel<Selective_Scan_fwd_kernel_traits<32, 16, 1, true, true, true, "
        "c10::BFloat16>>(SSMParamsBase)",
        "SSM",
    ),
    ("_chunk_scan_fwd_kernel", "SSM"),
    ("_chunk_state_bwd_db_kernel", "SSM"),
    ("_state_passing_fwd_kernel", "SSM"),
    ("_bmm_chunk_fwd_kernel", "SSM"),
    # attention
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_kernel0_0", "attention"),
    ("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>>", "attention"),
    # convolution
    (
        "void causal_conv1d_fwd_kernel<Causal_conv1d_fwd_kernel_traits<128, 4, true, c10::BFloat16>>(ConvParamsBase)",
        "convolution",
    ),
    ("sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64", "convolution"),
    ("sm80_xmma_wgrad_implicit_gemm_indexed_bf16bf16_bf16f32_f32_nhwckrsc_nhwc", "convolution"),
    # normalization
    ("_layer_norm_fwd_1pass_kernel", "normalization"),
    (
        "void at::native::batch_norm_collect_statistics_kernel<at::native::InvStd, float, float, float, int>",
        "normalization",
    ),
    # optimizer
    (
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
        "TensorListMetadata<5>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 5>>",
        "optimizer",
    ),
    # reduction
    ("input_reduce_fusion_179", "reduction"),
    ("input_scatter_fusion_63", "reduction"),
    (
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float>>>",
        "reduction",
    ),
    # elementwise / fusion
    ("loop_add_fusion_395", "elementwise/fusion"),
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>",
        "elementwise/fusion",
    ),
    ("triton_poi_fused_add_mul_0", "elementwise/fusion"),
    # copy / other
    ("memcpy32_post", "copy/other"),
    (
        "void at::native::elementwise_kernel<128, 2, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)>",
        "copy/other",
    ),
    ("transpose_fusion_3", "copy/other"),
    ("sort_3", "copy/other"),
]


@pytest.mark.parametrize(("kernel", "category"), NAMED)
def test_kernel_names_land_in_their_category(kernel, category):
    assert classify(kernel) == category


def test_every_category_is_reachable():
    assert {category for _, category in NAMED} == set(CATEGORIES)


def test_scope_refines_only_generic_xla_fusions():
    assert classify("input_reduce_fusion_16", "jit(step)/gps_layer/gated_gcn/batch_norm/reduce_sum") == "normalization"
    assert classify("loop_multiply_fusion_2", "jit(step)/transpose(jvp(block))/norm/mul") == "normalization"
    assert classify("loop_add_fusion_9", "jit(step)/optimizer/adam/add") == "optimizer"
    assert classify("input_reduce_fusion_3", "jit(step)/mixer/ssd/chunk_cumsum") == "SSM"
    assert classify("loop_add_fusion_9", "jit(step)/gated_gcn/add") == "elementwise/fusion"  # no scope rule matches
    assert classify("loop_convert_fusion_1", "jit(step)/block/convert_element_type") == "elementwise/fusion"
    assert classify("loop_add_fusion_5", "jit(step)/encoder/random_normal/add") == "elementwise/fusion"
    # a kernel whose name says what it is keeps it, whatever scope it ran in
    assert classify("gemm_fusion_dot_general_4", "jit(step)/attention/dot_general") == "GEMM"
    assert classify("nvjet_tst_64x8_64x16_4x1_v_bz_TNT", "jit(step)/batch_norm/x") == "GEMM"


def test_breakdown_keeps_the_unclassified_share():
    times = {"loop_add_fusion_1": 2.0, "selective_scan_fwd": 5.0, "some_new_kernel_xyz": 1.5, "memset32": 0.5}
    totals = breakdown(times)
    assert set(totals) == {*CATEGORIES, UNCLASSIFIED}
    assert totals[UNCLASSIFIED] == 1.5 and totals["SSM"] == 5.0 and totals["copy/other"] == 0.5
    assert totals["GEMM"] == 0.0
    assert sum(totals.values()) == pytest.approx(sum(times.values()))
    scoped = breakdown({"input_reduce_fusion_1": 3.0}, {"input_reduce_fusion_1": "a/batch_norm/b"})
    assert scoped["normalization"] == 3.0 and scoped["reduction"] == 0.0


@pytest.mark.parametrize("config", ["mamba1-tiny", "mamba2-tiny", "hybrid-tiny"])
def test_language_model_steps_carry_the_scopes_the_rules_read(config):
    """The compiled train step's ops carry the norm, SSM, attention and optimizer scopes that classify XLA's fusions
    (on the CPU the fusions differ from a GPU's, but the scopes in their metadata are the model's)."""
    cfg = load_config(config, ["--batch_size=2", "--seq_len=16"])
    task = task_for(cfg)
    setup = init_training(cfg, task)
    batch = task.make_dataset().train_batch(0, cfg.train.grad_accum_steps)
    _, scopes = compile_step(setup, batch)
    found = {classify("fusion", scope) for scope in scopes.values()}
    expected = {"normalization", "SSM", "optimizer"} | ({"attention"} if config.startswith("hybrid") else set())
    assert expected <= found, sorted(found)
