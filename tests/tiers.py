"""The tiers of the CPU suite besides the whole of it (``make test``, what CI runs), kept here in one place.

- ``QUICK`` (``make test-quick``, ``pytest -m quick``): the loop to run while working, a few minutes on 2 cores with
  nothing cached. Existing tests, one per path that must not break unnoticed: every package, every kernel's
  interpreted path on each of its backends at its smallest shape, one model of each family, one training step that
  writes a checkpoint, the command-line entry points' argument errors and the layering rule. ``conftest`` marks
  them and stops a run in which a listed test of a collected file no longer exists.
- ``SEED_SENSITIVE`` (``make test-seeds``, ``python -m tests.seeds``): the files whose assertions are tolerances on
  random inputs (kernels against oracles, modules against references, the PyTorch parity), run at fresh seeds
  before a tolerance or a kernel's numerics change.
"""

QUICK: tuple[str, ...] = (
    # the test suite's own machinery: the compilation cache, the interpreter's callbacks, the tiers
    "tests/test_tiers.py::test_listed_files_exist_and_the_quick_tier_touches_every_package",
    "tests/test_tiers.py::test_a_listed_test_missing_from_a_collected_file_stops_the_run",
    "tests/test_compile_cache.py::test_the_folder_follows_the_environment",
    "tests/test_compile_cache.py::test_configure_points_jax_at_the_folder_or_at_one_folder_for_the_run",
    "tests/test_compile_cache.py::test_prune_deletes_the_least_recently_used_until_the_folder_fits",
    "tests/test_interpreter_callbacks.py::test_installed_for_the_pinned_jax",
    "tests/test_interpreter_callbacks.py::test_cpu_computations_run_inline",
    "tests/test_interpreter_callbacks.py::test_interpreter_callbacks_get_cpu_arrays_with_jaxs_dtypes_and_values",
    "tests/test_interpreter_callbacks.py::test_other_callbacks_keep_jaxs_path",
    # the layering rule
    "tests/test_layering.py::test_no_import_runs_up_the_layers[pallas_kernels-forbidden0]",
    "tests/test_layering.py::test_no_import_runs_up_the_layers[jax_mamba-forbidden1]",
    "tests/test_layering.py::test_no_import_runs_up_the_layers[torch_reference-forbidden2]",
    "tests/test_layering.py::test_no_import_runs_up_the_layers[jax_mamba/checkpoints-forbidden3]",
    "tests/test_layering.py::test_no_import_runs_up_the_layers[jax_mamba/generate-forbidden4]",
    "tests/test_layering.py::test_jax_mamba_imports_torch_only_where_it_reads_or_writes_torch_files",
    "tests/test_layering.py::test_the_check_sees_an_upward_import",
    "tests/compare/test_commands.py::test_every_documented_command_runs_a_main",
    # every kernel interpreted, each backend once at its smallest shape (with its backward where a kernel runs it)
    "tests/pallas_kernels/test_selective_scan_pallas.py::test_forward_and_gradients_match_oracle_and_reference[2-1-8-4-1-float32-True-True-True-True-config0]",
    "tests/pallas_kernels/test_selective_scan_pallas.py::test_forward_and_gradients_match_oracle_and_reference[1-7-6-1-2-float32-False-False-False-False-config14]",
    "tests/pallas_kernels/test_selective_scan_pallas.py::test_forward_and_gradients_match_oracle_and_reference[2-1-128-4-1-float32-True-True-True-True-config28]",
    "tests/pallas_kernels/ssd/test_kernels.py::test_pallas_matches_oracle_and_reference[1-1-2-16-16-1-64-float32-None-False-True-False-False-dt_limit19-config19]",
    "tests/pallas_kernels/ssd/test_kernels.py::test_pallas_matches_oracle_and_reference[mosaic-forward-n256]",
    "tests/pallas_kernels/test_causal_conv1d_pallas.py::test_forward_and_gradients_match_oracle_and_reference[1-7-3-2-float32-False-False-False-False-config1]",
    "tests/pallas_kernels/test_causal_conv1d_pallas.py::test_forward_and_gradients_match_oracle_and_reference[1-1-128-4-float32-True-True-False-True-config13]",
    "tests/pallas_kernels/test_rmsnorm_gated_pallas.py::test_forward_and_gradients_match_oracle_and_reference[shape0-float32-None-False-True-False-None]",
    "tests/pallas_kernels/test_selective_state_update.py::test_step_matches_float64[True-float32-False-pallas]",
    "tests/pallas_kernels/test_selective_state_update.py::test_mosaic_gpu_kernel_matches_float64[False-False-float32-True]",
    "tests/pallas_kernels/test_matmul_few_rows.py::test_kernel_matches_float64_and_the_reference[shape0-float32]",
    "tests/pallas_kernels/test_mamba3_kernels.py::test_kernels_match_the_oracle_and_the_reference_gradients[1-1-2-2-64-64-8-False-True-False]",
    "tests/pallas_kernels/test_mamba3_kernels.py::test_mimo_kernels_match_the_oracle_and_the_reference_gradients[1-1-2-2-2-64-64-2-False-True-False-False]",
    "tests/pallas_kernels/test_mamba3_step_kernel.py::test_siso_step_matches_the_oracle[2-1-2-64-16-4-True-True-True-bfloat16-float32]",
    # one model of each family: Mamba-1, Mamba-2, hybrid, MambaVision, Graph-Mamba, Mamba-3
    "tests/jax_mamba/test_modules.py::test_lm_is_causal[Mamba1-extra0]",
    "tests/jax_mamba/test_modules.py::test_lm_is_causal[Mamba2-extra1]",
    "tests/jax_mamba/test_modules.py::test_lm_is_causal[Mamba2-extra2]",
    "tests/jax_mamba/test_mamba_vision.py::test_padding_to_whole_windows_keeps_the_shape",
    "tests/jax_mamba/test_mamba_vision.py::test_bf16_compute_keeps_parameters_and_statistics_float32",
    "tests/jax_mamba/test_graph_mamba.py::test_training_draws_orderings_from_rngs_and_refuses_without",
    "tests/jax_mamba/test_mamba3_module.py::test_forward_matches_numpy_slow_path[12-6-6-2-1.0-True-5-heavy_tail]",
    # a training run that writes a checkpoint and resumes from it
    "tests/jax_mamba/test_train.py::test_resume_on_fewer_devices_fits_the_saved_mesh",
    # the command-line entry points' argument errors
    "tests/jax_mamba/test_configs.py::test_invalid_configs_fail_at_load_naming_the_field[overrides5-unknown config key model.foo]",
    "tests/jax_mamba/test_configs.py::test_invalid_configs_fail_at_load_naming_the_field[overrides21-must look like --key=value]",
    "tests/torch_reference/test_generate_pretrained.py::test_generate_from_a_mamba_ssm_folder",
    "tests/jax_mamba/test_memory_plan.py::test_cli_prints_json_and_checks_its_arguments",
    "tests/jax_mamba/test_tokenized_data.py::test_tokenize_command_writes_a_token_folder",
    "tests/compare/characterize/test_report.py::test_command_refuses_without_a_gpu_and_bad_steps",
    "tests/compare/characterize/test_summary.py::test_summary_refuses_a_folder_without_a_report",
    "tests/compare/convergence/test_curves.py::test_configs_the_reference_cannot_follow_are_refused_before_any_run[mamba1-tiny-overrides0---seeds >= 3]",
    "tests/compare/convergence/test_curves.py::test_configs_the_reference_cannot_follow_are_refused_before_any_run[mambavision-tiny-overrides1-model.drop_path_rate must be 0]",
    "tests/compare/convergence/test_curves.py::test_configs_the_reference_cannot_follow_are_refused_before_any_run[mambavision-T-overrides2-optim.name must be adamw]",
    "tests/compare/convergence/test_curves.py::test_configs_the_reference_cannot_follow_are_refused_before_any_run[graph-mamba-tiny-overrides3-family 'graph_mamba' is not supported]",
    "tests/compare/convergence/test_curves.py::test_configs_the_reference_cannot_follow_are_refused_before_any_run[mamba1-tiny-overrides4-train.grad_accum_steps must be 1]",
    "tests/compare/convergence/test_tries.py::test_an_empty_folder_and_uneven_curves_are_refused",
    "tests/compare/convergence/test_determinism.py::test_one_repeat_is_refused",
    "tests/compare/kernels/test_bench.py::test_command_needs_a_gpu",
    "tests/compare/kernels/test_bench.py::test_pallas_config_variants_parse_and_validate",
    "tests/compare/kernels/test_bench.py::test_extra_shapes_parse_with_the_ops_fields",
    "tests/compare/kernels/test_ssd_forward_variants.py::test_refuses_without_a_gpu",
    "tests/compare/scaling/test_mesh_profile.py::test_command_refuses_a_step_count_below_one_and_a_beside_that_is_no_report",
    "tests/compare/scaling/test_sweep.py::test_torch_parallel_is_refused_without_the_reference_or_a_counterpart",
    "tests/compare/scaling/test_sweep.py::test_join_refuses_runs_that_disagree_or_repeat_a_point",
    "tests/compare/throughput/test_steps.py::test_a_run_stopped_mid_way_keeps_what_it_measured_and_says_so",
    "tests/torch_reference/test_build.py::test_build_needs_a_gpu",
    "tests/torch_reference/test_build.py::test_unknown_extension_names_are_refused",
    "tests/torch_reference/test_build.py::test_missing_offline_sdist_is_a_clear_error",
    "tests/torch_reference/test_train_bench.py::test_train_bench_parallel_needs_torchrun",
    "tests/torch_reference/test_step_modes.py::test_check_mode_names_the_argument",
    # parity against the PyTorch reference and weight conversion
    "tests/compare/parity/test_check.py::test_model_parity[mamba1]",
    "tests/compare/parity/test_check.py::test_command_line_writes_a_report",
    "tests/torch_reference/test_convert.py::test_round_trip_is_exact[mamba2]",
    "tests/torch_reference/test_convert.py::test_names_and_shapes_match_a_real_mamba_ssm_model[mamba2]",
)

SEED_SENSITIVE: tuple[str, ...] = (
    "tests/pallas_kernels/ssd/test_kernels.py",
    "tests/pallas_kernels/test_ssd_reference.py",
    "tests/pallas_kernels/test_ssd_varlen.py",
    "tests/pallas_kernels/test_ssd_final_state.py",
    "tests/pallas_kernels/test_ssd_registered_impl.py",
    "tests/pallas_kernels/test_selective_scan_pallas.py",
    "tests/pallas_kernels/test_selective_scan_reference.py",
    "tests/pallas_kernels/test_causal_conv1d_pallas.py",
    "tests/pallas_kernels/test_causal_conv1d_reference.py",
    "tests/pallas_kernels/test_rmsnorm_gated_pallas.py",
    "tests/pallas_kernels/test_rmsnorm_gated_reference.py",
    "tests/pallas_kernels/test_selective_state_update.py",
    "tests/pallas_kernels/test_matmul_few_rows.py",
    "tests/pallas_kernels/test_linear_scan.py",
    "tests/pallas_kernels/test_mamba3_kernels.py",
    "tests/pallas_kernels/test_mamba3_reference.py",
    "tests/pallas_kernels/test_mamba3_mimo_reference.py",
    "tests/pallas_kernels/test_mamba3_step_kernel.py",
    "tests/jax_mamba/test_modules.py",
    "tests/jax_mamba/test_attention.py",
    "tests/jax_mamba/test_lm_loss.py",
    "tests/jax_mamba/test_generate.py",
    "tests/jax_mamba/test_mamba3_module.py",
    "tests/jax_mamba/test_mamba_vision.py",
    "tests/jax_mamba/test_graph_mamba.py",
    "tests/compare/parity/test_check.py",
    "tests/compare/parity/test_graph_mamba.py",
    "tests/compare/parity/test_mamba3_jax_peer.py",
    "tests/torch_reference/test_graph_mamba.py",
    "tests/torch_reference/test_rotary.py",
)
