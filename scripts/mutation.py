"""Mutation testing of the methods' core math with cosmic-ray (docs/mutation.md).

Per method (or library part: the partitioners, the DP release, the privacy metrics): the
functions that hold its losses, updates, aggregations, message routing, random draws or
released statistics (`METHODS`: module -> qualified function names, a module anywhere under
src/fedshare/) and its own tests. For each entry the script

1. copies the working tree (tracked and untracked, not ignored files) into a scratch folder, so
   the mutants never touch the checkout (other runs may be importing it);
2. runs `cosmic-ray init` on each module and marks every mutant outside the listed functions,
   or of an operator not in `KEPT_OPERATORS`, as skipped (the mechanism of cosmic-ray's
   `cr-filter-*` tools);
3. checks that the test selection passes unmutated, then runs `cosmic-ray exec`: each mutant is
   applied to the copy, the selection runs (`pytest -x`), and a failing run kills the mutant;
4. keeps cosmic-ray's session databases in `<out>/<method>-sessions/` and writes
   `<out>/<method>.json` from them (per mutant: module, line, operator, outcome, diff; per
   module, the mutants not run) and prints the kill rate (`--collect` does this for a stopped
   run; `--skip-done` leaves out the mutants an earlier record holds, to finish it);
   `--recheck` runs only the survivors again against the current tests (after new tests were
   written for them); `--report` prints the table of docs/mutation.md.

Not the default test tier: it runs the selection once per mutant (minutes per method).

    pip install -e ".[mutation]"    # cosmic-ray, pinned in constraints.txt
    python scripts/mutation.py fedntd feddecorr --out runs/mutation
    python scripts/mutation.py --out runs/mutation --report
    python scripts/mutation.py flea --only soft_cross_entropy --out runs/mutation/part
    python scripts/mutation.py flea --collect --out runs/mutation      # a stopped run's part
    python scripts/mutation.py flea --skip-done old/flea.json --out runs/mutation/rest
"""

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARITHMETIC = ("Add", "Sub", "Mul", "Div")
KEPT_OPERATORS = (
    *(f"ReplaceBinaryOperator_{a}_{b}" for a in ARITHMETIC for b in ARITHMETIC if a != b),
    "ReplaceUnaryOperator_USub_UAdd",
    "ReplaceUnaryOperator_Delete_USub",
    "ReplaceUnaryOperator_Delete_Not",
    "ReplaceUnaryOperator_Delete_Invert",
    "ReplaceComparisonOperator_Eq_NotEq",
    "ReplaceComparisonOperator_NotEq_Eq",
    "ReplaceComparisonOperator_Lt_GtE",
    "ReplaceComparisonOperator_GtE_Lt",
    "ReplaceComparisonOperator_Gt_LtE",
    "ReplaceComparisonOperator_LtE_Gt",
    "ReplaceComparisonOperator_Is_IsNot",
    "ReplaceComparisonOperator_IsNot_Is",
    "ReplaceAndWithOr",
    "ReplaceOrWithAnd",
    "ReplaceTrueWithFalse",
    "ReplaceFalseWithTrue",
    "AddNot",
    "NumberReplacer",
    "ZeroIterationForLoop",
)
"""The mistakes the method tests must catch: a sign flipped (+ ↔ −, a unary minus dropped or
added), a weight or scale wrong (× ↔ ÷, × ↔ +, a constant changed), a condition or mask
negated, a loop dropped. Left out: replacements by bitwise, shift, power, modulo and
floor-division operators and the off-by-one comparisons (< ↔ ≤): on float tensors most of them
raise at once, which counts as killed and inflates the rate without testing anything."""
PYTEST = (
    "python -m pytest -x -q -p no:cacheprovider -p _hypothesis_pytestplugin"
    " -m 'not paper and not gpu'"
)
"""Run with PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 (`TEST_ENV`): of the installed plugins only
hypothesis's is loaded (about 2 s less per mutant, where the start-up dominates)."""
TEST_ENV = {"OMP_NUM_THREADS": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


@dataclass(frozen=True)
class Target:
    modules: dict[str, tuple[str, ...]]
    """Module path -> the qualified names of the functions whose lines are mutated."""
    tests: str
    """The pytest arguments of the method's own tests."""


PARTITION_TESTS = (
    "tests/test_partition.py -k 'not partition_cli and not partition_png and not plot_partition'"
)
"""The partitioners' tests without the CLI and plotting ones (seconds, not minutes). The -k
applies to every file of a selection: its words must not match other tests' names."""

RESULTS_REST = "tests/test_mutation_results_rest.py"
"""The results/ and reproduce/ modules' exact unit tests (no simulation)."""

NO_CONFTEST = "--noconftest"
"""For selections that use none of tests/conftest.py's fixtures: without it a test run does
not import torch, hypothesis and the data loaders it does not need (measured: 0.6 s of CPU
instead of 2.9 s for the `results` entry). A selection that needs it fails the unmutated check."""

RUNNING_MEAN_FUNCTIONS = (
    "RunningMean.__init__",
    "RunningMean.add",
    "RunningMean.empty",
    "RunningMean.value",
)
"""The engine's weighted mean (the `fedavg` and `engine_records` entries)."""

FEDPFT_GMM_FUNCTIONS = (
    "GaussianMixture.full_covariances",
    "GaussianMixture.log_prob",
    "GaussianMixture.sample",
    "_component_log_prob",
    "_m_step",
    "kmeans_labels",
    "fit_gmm",
    "point_mass",
    "unpack_mixtures",
)
"""functional/gmm.py's functions that FedPFT uses (the `fedpft` and `functional_gmm` entries)."""

FEDPFT_GMM_TESTS = " ".join(
    f"tests/test_fedpft.py::test_{name}"
    for name in (
        "synthesis_draws_round_n_times_multiplier_at_least_one_from_each_pairs_stream",
        "local_mixtures_fit_each_class_and_report_drops_and_mean_em_iterations",
        "dp_releases_one_gaussian_per_class_of_at_least_two_samples_without_em",
        "engine_bytes_equal_the_formula",
        "shrink_policy_and_per_client_components",
        "fedpft_is_deterministic_and_seed_dependent",
    )
)
"""FedPFT's tests that use functional/gmm.py (`fedpft`; `functional_gmm`, after test_gmm.py)."""

EXEC_TESTS = (
    "round_stats_average_each_key_over_the_clients_that_reported_it",
    "the_serial_executor_routes_counts_and_keeps_in_cohort_order",
    "ranks_give_the_one_process_result_exactly",
    "each_rank_runs_the_clients_its_split_gives_it",
    "a_rank_with_no_client_of_the_phase_follows_the_last_clients_random_state",
    "batched_ranks_give_the_batched_one_process_result",
    "a_peer_message_to_a_later_client_of_the_step_is_refused_across_ranks",
    "a_peer_message_to_a_client_that_does_not_exist_is_refused",
    "the_last_client_may_send_a_peer_message_to_the_last_client",
    "an_aggregate_that_leaves_updates_unread_is_refused",
    "the_progress_line_counts_the_clients_received",
    "personal_messages_are_counted_for_their_receiver_and_handed_to_it",
    "batched_chunks_hold_chunk_clients_in_cohort_order",
    "batched_steps_come_back_in_cohort_order_routed_and_counted_as_serial_ones",
    "batched_chunks_see_the_peer_messages_of_earlier_chunks_as_serial_clients_do",
    "a_batched_step_that_returns_fewer_updates_than_clients_is_refused",
    "a_training_phase_without_a_batched_step_warns_once_and_runs_serially",
    "a_phase_that_does_not_train_runs_serially_without_a_warning",
    "make_executor_picks_serial_batched_and_ranked",
    "clients_are_grouped_by_architecture_the_last_clients_group_last",
    "batched_steps_of_several_architectures_come_back_in_cohort_order",
    "the_writer_decides_stops_and_sends_its_value_and_random_state",
    "finish_gathers_each_processs_measurements",
    "an_in_order_phase_runs_whole_on_every_rank",
    "a_failed_client_step_is_raised_on_every_rank",
)
"""tests/test_mutation_engine_exec.py's tests of the executors (`engine_exec`)."""
COLLECTIVE_TESTS = (
    "gather_returns_every_ranks_object_in_rank_order_and_counts_the_bytes",
    "one_rank_exchanges_with_nobody",
    "a_failure_on_any_rank_is_raised_on_every_rank_the_lowest_ranks_first",
    "an_object_that_does_not_pickle_fails_every_rank_naming_its_rank",
    "pass_along_applies_each_ranks_step_in_rank_order",
    "pass_along_on_one_rank_is_the_step",
    "from_writer_runs_on_rank_zero_alone_and_sends_its_value_or_its_error",
    "check_same_names_the_first_rank_that_differs",
    "a_lost_process_becomes_rank_failure_with_the_first_line_of_the_reason",
    "settle_waits_for_every_rank",
    "the_random_state_crosses_with_its_snapshot",
    "joining_sets_up_the_runs_group_and_a_gloo_group_for_objects",
    "bytes_round_trip_onto_the_asked_device",
    "writer_is_rank_zero",
    "joining_without_the_launchers_environment_names_what_is_missing",
    "launched_means_a_world_of_more_than_one",
    "local_device_shares_the_gpus_among_the_processes",
    "the_ranks_exit_code_when_they_all_failed_alike_else_one_sentence",
    "nccl_only_where_each_local_process_has_a_gpu_of_its_own",
)
"""Its tests of the ranks' collectives, on threads (`engine_distributed`)."""

BATCHED_TESTS = (
    "clip_rows_is_clip_grad_norm_per_row",
    "the_stacked_optimizer_steps_each_row_as_torch_steps_that_client",
    "stacked_adam_adds_its_epsilon_where_gradients_are_that_small",
    "a_stacked_run_trains_each_client_as_it_trains_alone",
    "a_stacked_run_without_batches_returns_zero_losses",
    "a_stacked_run_defaults_to_the_clients_batches",
)
"""Its tests of batched training (`engine_batched`)."""
CLIENT_TESTS = (
    "a_client_reaches_its_own_samples_by_position",
    "a_clients_defaults_and_its_copies_of_what_it_was_given",
    "a_clients_streams_learning_rate_optimizer_and_autocast",
    "batches_shuffle_the_clients_samples_and_the_extra_ones_it_received",
    "the_client_side_is_a_sealed_copy_set_up_without_moving_the_runs_stream",
    "a_client_step_that_is_not_the_strategys_method_is_refused",
    "cut_metrics_keeps_the_whole_lines_up_to_the_round",
    "a_resumed_run_continues_exactly_and_a_finished_one_runs_nothing",
    "a_checkpoint_is_finished_only_with_every_round_and_a_completed_summary",
    "a_used_folder_is_refused_unless_overwritten_and_a_resume_needs_one",
    "a_resume_on_another_partition_is_refused",
    "a_write_failure_says_what_the_folder_keeps",
    "a_run_that_failed_before_a_round_keeps_no_model_and_says_why",
    "partition_json_is_written_and_a_resume_rewrites_only_a_cut_off_one",
)
"""Its tests of the client, its wall and the run folder (`engine_client`)."""
RUN_FOLDER_TESTS = (
    "begin_restores_the_run_from_an_inline_checkpoint",
    "begin_marks_inline_states_changed_only_where_no_segment_holds_them",
    "a_new_run_without_a_folder_restores_nothing_and_a_cut_back_does_nothing",
    "states_inline_reads_a_checkpoints_segments_into_it",
    "cut_back_cuts_the_folders_metrics_after_the_round_and_skips_a_missing_file",
)
"""tests/test_mutation_engine_rest.py's run-folder tests, run first (`engine_client`)."""

REPRODUCE_STORED_TESTS = "stored or measure or read_name"
"""tests/test_mutation_small.py's tests of reproduce's stored cells (`reproduce_stored`); the
file's other tests are `library_small`'s."""

METHODS: dict[str, Target] = {
    "fedaa": Target(
        {
            "src/fedshare/strategies/fedaa.py": (
                "FedAA._finetuned",
                "FedAA.identifier_message",
                "FedAA.identifier_of",
                "FedAA.adversarial_loss",
                "FedAA._train_identifiers",
                "FedAA.second_pass",
            ),
            "src/fedshare/strategies/_identifier.py": ("identifier_loss",),
        },
        " ".join(
            f"tests/test_fedaa.py::test_{name}"
            for name in (
                "the_second_pass_uses_the_received_identifier_exactly_when_lambda_is_positive",
                "eq7_is_ce_plus_weighted_softplus_of_the_identifiers_logit_with_its_gradient",
                "identifier_loss_is_eq6_with_separate_means",
                "each_identifier_trains_on_f_avgs_features_of_all_examples_and_the_round_logs"
                "_the_mean",
                "finetune_fits_the_other_clients_labels_with_local_trainings_optimizer",
                "finetune_uses_only_the_other_clients_examples",
                "each_client_is_sent_the_identifier_that_scores_its_own_examples_highest",
                "non_i_keeps_the_first_aggregations_model_path",
                "both_client_phases_run_batched_as_serially",  # the serial second pass
            )
        ),
    ),
    "fedntd": Target(
        {
            "src/fedshare/strategies/fedntd.py": ("FedNTD.local_loss",),
            "src/fedshare/functional/losses.py": ("not_true_distillation", "distillation_kl"),
        },
        "tests/test_flea.py::test_soft_cross_entropy_and_distillation"  # the shared KL's test
        " tests/test_feddecorr_fedntd.py"
        " -k 'not_true or (gradient and fedntd) or refused or distillation'",
    ),
    "feddecorr": Target(
        {
            "src/fedshare/strategies/feddecorr.py": ("FedDecorr.local_loss",),
            "src/fedshare/functional/losses.py": ("decorrelation_loss",),
        },
        "tests/test_feddecorr_fedntd.py -k 'decorrelation or (gradient and feddecorr)'",
    ),
    "flea": Target(
        {
            "src/fedshare/strategies/flea.py": (
                "FLea._step_loss",
                "FLea._warmup_loss",
                "FLea._mixed_loss",
                "FLea._teacher_logits",
            ),
            "src/fedshare/functional/mixup.py": ("as_soft_labels", "mix_labels"),
            "src/fedshare/functional/losses.py": ("soft_cross_entropy",),  # KL: under fedntd
        },
        " ".join(
            f"tests/test_flea.py::test_{name}"
            for name in (
                "step_loss_is_the_code_form_term_by_term_value_and_gradient",
                "warmup_step_loss_is_ce_plus_kd_on_raw_inputs_plus_dcor",
                "dcor_counts_from_two_samples_and_skips_a_batch_of_one",
                "kd_teacher_is_frozen_with_mixed_inputs",
                "mixup_identities",
                "soft_cross_entropy_and_distillation",
            )
        ),
    ),
    "fedaa_synthesis": Target(  # Eq. 4 (FedAA's Sec. 3.3): the server's adversarial examples
        {
            "src/fedshare/functional/fooling.py": (
                "Box.clamp",
                "fool",
                "_scipy_lbfgsb",
                "_torch_lbfgs",
            ),
            "src/fedshare/strategies/fedaa.py": ("FedAA._synthesise", "input_box"),
        },
        " ".join(
            f"tests/test_fedaa.py::test_{name}"
            for name in (
                "torch_solver_runs_blocks_of_twenty_lbfgs_iterations_from_fresh_histories",
                "the_default_solve_is_scipys_lbfgsb_for_100_iterations_from_unit_noise",
                "the_box_is_the_normalised_image_of_the_stored_range",
                "synthesis_starts_from_scaled_clamped_noise_and_reports_its_own_losses",
                "each_clients_examples_fool_its_own_model_with_its_own_labels_and_noise",
                "synthesis_drives_the_frozen_models_loss_down_inside_the_box",
                "finetune_uses_only_the_other_clients_examples",
            )
        ),
    ),
    "rebafl": Target(  # ReBaFL's Sec. 4.1-4.2: R-BSM (Eqs. 9-10), prototypes (Eqs. 15, 18, 21, 23)
        {
            "src/fedshare/functional/calibration.py": (
                "class_counts",
                "check_eps",
                "relaxed_prior",
                "log_relaxed_prior",
                "balanced_softmax_loss",
            ),
            "src/fedshare/functional/prototypes.py": (
                "class_means",
                "feature_prototypes",
                "pack",
                "unpack",
                "PrototypeAverager.add",
                "PrototypeAverager.result",
                "cyclic_targets",
                "transfer_features",
            ),
            "src/fedshare/strategies/rebafl.py": (
                "ReBaFL.client_eps_of",
                "ReBaFL.broadcast",
                "ReBaFL.client_update",
                "ReBaFL.batched_update",
                "ReBaFL._plan",
                "ReBaFL._upload",
                "ReBaFL._plain_loss",
                "ReBaFL._local_loss",
                "ReBaFL.aggregate",
            ),
        },
        " ".join(
            f"tests/test_rebafl.py::test_{name}"
            for name in (
                "rbsm_with_eps_one_is_plain_cross_entropy",
                "rbsm_with_eps_zero_is_balanced_softmax_over_present_classes",
                "relaxed_prior_matches_the_worked_numbers",
                "one_class_client_bsm_loss_and_gradient_are_zero_but_not_under_rbsm",
                "absent_class_row_is_frozen_by_bsm_and_pushed_less_by_rbsm_than_softmax",
                "bad_calibration_values_are_rejected",
                "prototypes_are_exact_class_means",
                "the_wire_carries_the_held_classes_and_unpacks_to_the_full_table",
                "feature_prototypes_use_the_penultimate_features",
                "transfer_keeps_the_deviation_and_the_target_prototype",
                "full_batch_of_fifty_targets_every_class_five_times",
                "local_loss_and_its_gradient_are_rbsm_plus_mu_times_the_augmented_rbsm",
                "augmentation_loss_trains_only_the_classifier",
                "the_plan_refreshes_the_clients_own_classes_and_keeps_the_other_received_ones",
                "server_prototypes_are_the_count_weighted_mean_of_reporters",
                "rebafl_aggregate_averages_reported_prototypes_and_forgets_unreported",
                "prototype_memory_last_keeps_a_class_until_it_is_reported_again",
                "a_batched_chunk_of_clients_with_different_eps_steps_each_client_serially",
                "rebafl_shares_only_prototypes_of_held_classes",
                "one_class_clients_share_and_augment_only_when_the_minimum_allows",
                "a_class_of_one_sample_counts_towards_the_minimum_for_sharing",
                "each_method_runs_and_learns[rebafl]",
            )
        )
        + " tests/test_batched.py::test_strategies_with_per_client_state_run_batched"
        "[2-epochs-rebafl]",
    ),
    "fedpft": Target(  # FedPFT's Sec. 4: per-class GMMs by EM, the wire, sampling, the head
        {
            "src/fedshare/functional/gmm.py": FEDPFT_GMM_FUNCTIONS,
            "src/fedshare/strategies/fedpft.py": (
                "FedPFT.fit_class",
                "FedPFT.local_mixtures",
                "FedPFT.synthesize",
                "FedPFT.aggregate",
            ),
            "src/fedshare/strategies/_feature_heads.py": ("fit_head",),  # App. D.1's head
        },
        "tests/test_fedpft.py::test_fit_head_is_sgd_on_ce_plus_t2_kl_written_out"
        f" {FEDPFT_GMM_TESTS} tests/test_gmm.py",
    ),
    "xormixfl": Target(  # XorMixFL's Sec. 3: blends (Eq. 1), XOR encode / decode (Eqs. 2-3)
        {
            "src/fedshare/functional/xor_mixup.py": (
                "to_bytes",
                "from_bytes",
                "quantize",
                "binarize",
                "blend",
                "xor_reduce",
                "xor_code",
                "draw_distinct",
                "blend_by_label",
            ),
            "src/fedshare/functional/mixup.py": ("fold_weights", "mix", "soft_labels"),
            "src/fedshare/strategies/xormixfl.py": (
                "SampleSharing.client_update",
                "SampleSharing.aggregate",
                "XorMixFL._keys",
                "XorMixFL.encode",
                "XorMixFL.augment",
                "MixFL._weights",
                "MixFL.encode",
                "MixFL.augment",
            ),
        },
        " ".join(
            f"tests/test_xormixfl.py::test_{name}"
            for name in (
                "bytes_quantize_binarize_and_xor_written_out",
                "soft_labels_add_each_positions_weight_to_its_class",
                "a_label_with_fewer_than_p_samples_blends_what_it_has_and_repeats_its_first",
                "a_device_encodes_its_quota_with_dummies_it_holds",
                "preblend_encodes_with_one_blend_of_the_m_dummies",
                "blend_arithmetic",
                "blend_by_label_draws_distinct_samples_of_the_right_label",
                "background_passes_through_the_code_and_the_decoding",
                "decoding_with_the_devices_own_keys_is_exact",
                "uploads_are_codes_of_the_recorded_contributors",
                "mixfl_uploads_midpoints_with_soft_labels_at_alpha_half",
                "mixfl_mix_order_and_ratio",
                "mixfl_equal_order_uploads_the_plain_mean",
                "mixfl_hard_labels_train_on_the_target_label",
                "server_decodes_with_its_own_dummy_samples_and_trains_on_base_plus_decoded",
                "mixfl_server_trains_on_the_uploads_with_one_hot_base_rows_and_mixup_labels",
                "quotas_balance_the_server_and_split_evenly",
                "a_device_asked_for_one_sample_uploads_it",
                "protocol_shape_one_upload_per_device_no_model_traffic",
            )
        ),
    ),
    "fedavg": Target(  # FedAvg's weighted mean: the engine's accumulator and the server step
        {
            "src/fedshare/engine/aggregation.py": RUNNING_MEAN_FUNCTIONS,
            "src/fedshare/engine/messages.py": ("Update.aggregation_weight",),
            "src/fedshare/strategies/base.py": (
                "Strategy.aggregate",
                "Strategy.load_mean",
                "Strategy.average_weights",
                "Strategy.running_mean",
            ),
        },
        " ".join(
            f"tests/test_engine.py::test_{name}"
            for name in (
                "running_mean_is_the_weighted_mean_in_the_accumulators_dtype",
                "running_mean_refuses_negative_weights_and_an_empty_mean",
                "average_weights_uses_each_updates_weight_or_count_and_collects_the_rest",
                "fedavg_aggregate_is_the_sample_weighted_mean",
            )
        ),
    ),
    # baselines (issue 33)
    "scaffold": Target(
        {
            "src/fedshare/strategies/scaffold.py": (
                "Scaffold.client_update",
                "Scaffold.batched_update",
                "Scaffold._c_i",
                "Scaffold._upload",
                "Scaffold.aggregate",
            ),
        },
        " ".join(
            f"tests/test_scaffold_feddyn.py::test_scaffold_{name}"
            for name in (
                "option_ii_equations_exactly",
                "without_control_updates_keeps_c_zero_and_is_fedavg",
                "after_step_correction_is_rebafls_code_exactly",
                "after_step_equals_the_gradient_form_for_plain_sgd",
            )
        ),
    ),
    "feddyn": Target(
        {
            "src/fedshare/strategies/feddyn.py": (
                "FedDyn.client_update",
                "FedDyn.batched_update",
                "FedDyn._grad_k",
                "FedDyn._upload",
                "FedDyn.aggregate",
            ),
        },
        "tests/test_scaffold_feddyn.py::test_feddyn_equations_exactly",
    ),
    "fedprox": Target(
        {
            "src/fedshare/strategies/fedprox.py": (
                "proximal_grads",
                "add_proximal_grad_",
                "FedProx.client_update",
                "FedProx.batched_update",
            ),
        },
        "tests/test_moon_fedbn_fedopt.py::test_fedprox_hook_is_the_gradient_of_its_penalty"
        " tests/test_moon_fedbn_fedopt.py::test_fedprox_rounds_equal_the_proximal_sgd_written_out"
        " tests/test_moon_fedbn_fedopt.py::test_fedprox_batched_rows_take_their_own_plain_norm",
    ),
    "moon": Target(
        {
            "src/fedshare/strategies/moon.py": (
                "contrastive_loss",
                "MoonNet.forward",
                "MOON.client_update",
                "MOON.batched_update",
                "MOON._previous",
                "MOON._batches",
                "MOON._loss",
                "MOON._upload",
            ),
        },
        " ".join(
            f"tests/test_moon_fedbn_fedopt.py::test_moon_{name}"
            for name in (
                "contrastive_loss_is_the_papers_formula",
                "local_loss_is_ce_plus_mu_times_l_con_value_and_gradient",
                "term_pulls_towards_the_global_and_away_from_the_previous_model",
                "first_participation_contrasts_the_initial_network",
                "batched_with_a_short_last_chunk_equals_serial",
            )
        ),
    ),
    "fedmix": Target(
        {
            "src/fedshare/strategies/fedmix.py": ("fedmix_loss", "FedMix._mixed_batches"),
            "src/fedshare/functional/mixup.py": ("mix_pair",),
        },
        " ".join(
            f"tests/test_fedmix_loss.py::test_{name}"
            for name in (
                "code_form_is_soft_cross_entropy_on_the_beta_mix",
                "naivemix_weighs_the_local_and_the_mean_label_by_one_minus_lambda_and_lambda",
                "fedmix_is_the_first_order_expansion_with_its_local_term",
                "each_local_batch_is_cut_to_the_next_batch_of_means_with_its_own_lambda",
            )
        )
        + " tests/test_flea.py::test_mixup_identities",  # mix_pair's own test
    ),
    "ccvr": Target(  # Luo et al. 2021, §4: class Gaussians pooled exactly, virtual features
        {
            "src/fedshare/functional/class_gaussians.py": (
                "class_statistics",
                "PooledClassGaussians.add",
                "PooledClassGaussians.result",
                "sample_virtual_features",
                "pack_symmetric",
                "unpack_symmetric",
            ),
            "src/fedshare/strategies/ccvr.py": (
                "CCVR.calibration_step",
                "CCVR.calibrate",
                "CCVR.summary_metrics",
            ),
            "src/fedshare/strategies/_head_calibration.py": (
                "HeadCalibration.after_training",
                "HeadCalibration.refit_head",
            ),
        },
        " ".join(
            f"tests/test_ccvr.py::test_{name}"
            for name in (
                "client_statistics_are_the_unbiased_mean_and_covariance_per_class",
                "pooled_statistics_equal_those_of_the_pooled_features",
                "single_samples_of_a_class_on_two_clients_pool_into_their_spread",
                "summary_counts_the_groups_of_one_sample",
                "symmetric_packing_round_trips_and_halves_the_numbers",
                "virtual_features_follow_their_class_gaussian_and_carry_its_label",
                "a_singular_covariance_still_samples_around_its_mean",
                "without_calibration_epochs_it_is_fedavg_plus_the_counted_statistics",
                "the_server_pools_every_clients_statistics_and_recalibrates_the_head",
            )
        ),
    ),
    "fedgen": Target(  # Zhu et al. 2021, §3.2: latent generator vs the label-weighted heads
        {
            "src/fedshare/functional/generative.py": (
                "diversity_loss",
                "label_weights",
                "weighted_ensemble_logits",
                "ensemble_cross_entropy",
            ),
            "src/fedshare/strategies/fedgen.py": (
                "LatentGenerator.forward",
                "LatentGenerator.sample",
                "FedGen.broadcast",
                "FedGen.client_update",
                "FedGen.batched_update",
                "FedGen.with_counts",
                "FedGen.generated_batches",
                "FedGen.generated_loss",
                "FedGen.label_prior",
                "FedGen.aggregate",
                "FedGen.head_params",
                "FedGen.train_generator",
            ),
        },
        " ".join(
            f"tests/test_fedgen.py::test_{name}"
            for name in (
                "each_head_is_weighted_by_its_clients_share_of_the_label",
                "a_class_nobody_holds_weighs_zero_and_a_single_sample_weighs_fully",
                "diversity_loss_is_fedgens_exp_of_minus_the_mean_product_of_distances",
                "generated_features_enter_the_heads_loss_alone",
                "clients_draw_labels_from_the_received_prior_and_features_for_those_labels",
                "round_zero_is_fedavg_and_counts_and_generator_are_counted",
                "generator_steps_are_the_weighted_ensemble_ce_plus_diversity_written_out",
                "the_server_trains_the_generator_towards_what_the_weighted_heads_call_its_label",
            )
        )
        + " tests/test_batched.py::test_strategies_with_their_own_local_loss_run_batched"
        "[2-epochs-fedgen]",
    ),
    "dsfl": Target(  # FedPFT's App. D.1: top-K of the update, mask + values, error feedback
        {
            "src/fedshare/functional/sparse.py": ("top_k_mask", "pack", "unpack"),
            "src/fedshare/strategies/dsfl.py": (
                "DSFL.client_update",
                "DSFL.batched_update",
                "DSFL.sparsify",
                "DSFL.aggregate",
            ),
        },
        "tests/test_dsfl.py::test_pack_round_trips_the_top_k_entries"
        " tests/test_dsfl.py::test_error_feedback_adds_the_dropped_part_to_the_next_update"
        " tests/test_dsfl.py::test_error_feedback_keeps_the_dropped_part_per_client"
        " tests/test_dsfl.py::test_uploads_are_the_packed_sparse_updates_and_keep_one_is_fedavg"
        " tests/test_batched.py::test_strategies_with_per_client_state_run_batched"
        "[2-epochs-dsfl-error-feedback]",
    ),
    "fedbe": Target(  # FedBE §4: Gaussian and Dirichlet heads, mean-softmax targets, SWA
        {
            "src/fedshare/strategies/fedbe.py": (
                "gaussian_heads",
                "dirichlet_heads",
                "FedBE.sample_counts",
                "FedBE.teachers",
                "FedBE.distill",
            ),
            "src/fedshare/strategies/_server_distillation.py": (
                "ProbabilityMean.forward",
                "ServerDistillation.aggregate",  # FedBE's and FedKT's server step
                "ServerDistillation.distill_passes",
            ),
            "src/fedshare/strategies/_feature_heads.py": (
                "IterateAverage.add",
                "IterateAverage.after_steps",
                "IterateAverage.load_into",
            ),
        },
        " ".join(
            f"tests/test_fedbe_fedkt.py::test_{name}"
            for name in (
                "gaussian_samples_have_the_heads_weighted_mean_and_variance",
                "dirichlet_samples_are_convex_combinations_of_the_client_heads",
                "targets_the_ensemble_mean_probability_and_the_majority_vote",
                "a_class_every_teacher_rules_out_keeps_a_finite_target",
                "swa_averages_the_iterates_at_the_chosen_steps",
                "swa_from_step_two_every_three_steps",
                "sample_counts_split_the_posterior_draws",
                "fedbe_teachers_are_clients_mean_gaussian_and_dirichlet_heads",
                "fedbe_gaussian_teachers_follow_the_sample_weighted_heads",
                "fedbe_distils_the_teachers_mean_probability_into_swa_from_the_chosen_step",
                "fedbe_student_is_the_swa_average_and_reduces_to_the_last_iterate",
                "the_server_distils_its_features_from_the_mean_or_a_fresh_head_for_the_pooled_steps",
            )
        ),
    ),
    # ------------------------------------------------ beyond the strategies: data/, privacy/
    "label_skew": Target(  # NIID-Bench's Dir(α) and #C=q; FLea's block-wise Dir(α) (App. C.1)
        {
            "src/fedshare/data/label_skew.py": (
                "hetero_dirichlet",
                "dirichlet",
                "dirichlet_blocks",
                "quantity",
            ),
        },
        f"{NO_CONFTEST} {PARTITION_TESTS} tests/test_mutation_partitions.py",
    ),
    "pathological": Target(  # ReBaFL's pathological and clustered splits (Sec. 5.1), shards
        {
            "src/fedshare/data/pathological.py": (
                "draw_label_sets",
                "take_from_pools",
                "pathological",
                "clustered",
                "islands",
                "shards",
            ),
        },
        f"{NO_CONFTEST} tests/test_mutation_partitions.py {PARTITION_TESTS}",
    ),
    "label_deficit_shift": Target(  # XorMixFL's target-label deficit (Sec. 4.1); domain shifts
        {
            "src/fedshare/data/label_deficit.py": ("xormix",),
            "src/fedshare/data/shift.py": (
                "task",
                "covariate",
                "_bounds",
                "_rotate",
                "transform_inputs",
            ),
        },
        f"{NO_CONFTEST} tests/test_mutation_shift.py {PARTITION_TESTS}",
    ),
    "partition_stats": Target(  # partition.json's statistics, the fingerprint, make_partition
        {
            "src/fedshare/data/partitioners.py": (
                "Partition.sizes",
                "Partition.num_clients",
                "Partition.coverage",
                "Partition.summary",
                "fingerprint",
                "_as_split",
                "make_partition",
                "iid",
            ),
        },
        f"{NO_CONFTEST} tests/test_mutation_partition_stats.py {PARTITION_TESTS}",
    ),
    "dp": Target(  # DP-FedPFT (FedPFT's Sec. 4.3, Theorem 4.1): calibration and the release
        {
            "src/fedshare/privacy/dp.py": (
                "mean_cov_sensitivity",
                "fedpft_noise_std",
                "gaussian_delta",
                "check_paper_calibration",
                "analytic_gaussian_std",
                "noise_std",
                "project_psd",
                "symmetric_noise",
                "private_mean_cov",
                "reduce_covariance",
                "_check_budget",
            ),
        },
        f"{NO_CONFTEST} tests/test_dp.py tests/test_mutation_privacy.py",
    ),
    # ------------------------------------------------ engine/ (not its simulation, evaluation,
    # callbacks: being refactored), results/, reproduce's statistics
    "engine": Target(  # who takes part, the random streams, bytes, flat and per-client state
        {
            "src/fedshare/engine/sampling.py": (
                "cohort_size",
                "availability_per_client",
                "CohortSampler.__init__",
                "CohortSampler.sampled",
                "CohortSampler.available",
                "CohortSampler.cohort",
            ),
            "src/fedshare/engine/rng.py": (
                "derive_seed",
                "torch_generator",
                "numpy_rng",
                "seed_global_torch",
            ),
            "src/fedshare/engine/accounting.py": (
                "tensor_bytes",
                "payload_bytes",
                "message_bytes",
                "Traffic.sent_down",
                "Traffic.sent_personal",
                "Traffic.sent_up",
                "Traffic.sent_peer",
            ),
            "src/fedshare/engine/flat.py": (
                "FlatState.__init__",
                "FlatState.tensors",
                "FlatState.flatten",
                "FlatState.views",
                "FlatState.load_",
            ),
            "src/fedshare/engine/client_state.py": (
                "ClientStates.checkout",
                "ClientStates.checkin",
                "ClientStates.take_changed",
                "ClientStates.mark_all_changed",
                "ClientStates.bytes_held",
                "ClientStates.load_state_dict",
            ),
        },
        f"{NO_CONFTEST} tests/test_mutation_engine.py",
    ),
    "engine_resume": Target(  # resume's checks, checkpoints, the ranks' split of a cohort
        {
            "src/fedshare/engine/resume.py": (
                "flatten",
                "changed_keys",
                "check_same_run",
                "check_saved_rounds",
            ),
            "src/fedshare/engine/checkpoint.py": (
                "save_checkpoint",
                "torch_load_problem",
                "load_checkpoint",
                "rng_state",
                "restore_rng_state",
            ),
            "src/fedshare/engine/distributed.py": ("assign", "blocks", "detached"),
        },
        f"{NO_CONFTEST} tests/test_mutation_engine.py",
    ),
    "engine_training": Target(  # every training loop's batches and steps; lr schedules
        {
            "src/fedshare/engine/training.py": (
                "shuffled_positions",
                "bf16_autocast",
                "fit",
                "check_finite",
            ),
            "src/fedshare/engine/optim.py": ("learning_rate", "make_optimizer"),
        },
        f"{NO_CONFTEST} tests/test_mutation_training.py",
    ),
    "results": Target(  # the report's and reproduce's statistics of a cell, over its seeds
        {
            "src/fedshare/results/stats.py": (
                "stat_header",
                "finite",
                "mean_std",
                "summary_value",
            ),
            "src/fedshare/reproduce/measure.py": (
                "Measured.n",
                "Measured.mean_std",
                "Measured.stat",
                "Measured.per_seed",
                "Measured.element_stats",
                "curve_value",
                "is_curve",
                "cell_value",
                "bytes_sent",
                "_run_list",
            ),
        },
        f"{NO_CONFTEST} tests/test_mutation_results.py",
    ),
    "engine_loop": Target(  # the round loop: phases, members, bytes, how a run ends; callbacks
        {
            "src/fedshare/engine/simulation.py": (
                "Simulation.__init__",
                "Simulation.run_round",
                "Simulation.stage",
                "Simulation.run",
                "Simulation._run",
                "Simulation._finished",
                "Simulation._rounds",
                "Simulation._completed",
                "Simulation._stopped",
                "Simulation.cpu_summary",
            ),
            "src/fedshare/engine/callbacks.py": (
                "as_callback",
                "round_record",
                "MetricsLog.on_round_end",
                "Checkpoints.on_round_end",
                "ProgressBar.on_stage",
                "ProgressBar.on_round_end",
                "ProgressBar.on_end",
                "EarlyStopping.__init__",
                "EarlyStopping.on_round_end",
                "TimeBudget.on_round_end",
            ),
        },
        f"{NO_CONFTEST} tests/test_mutation_engine_loop.py",
    ),
    "engine_eval": Target(  # evaluation (eval mode, batches, schedule) and personal accuracy
        {
            "src/fedshare/engine/evaluation.py": (
                "evaluate",
                "evaluate_batches",
                "validation_metrics",
                "Evaluation.on_begin",
                "Evaluation.measure",
                "Evaluation.measures",
                "Evaluation._personal_metrics",
                "Evaluation.on_complete",
            ),
            "src/fedshare/engine/personal_eval.py": (
                "personal_test_splits",
                "split_accuracy",
                "_accuracy",
                "correct_on",
                "personal_metrics",
                "_all_needed",
            ),
        },
        f"{NO_CONFTEST} tests/test_mutation_engine_loop.py"
        " tests/test_personal_eval.py::"
        "test_a_client_whose_classes_have_no_test_sample_is_refused_before_round_0",
    ),
    "engine_records": Target(  # summary.json's sums, kept messages, state segments, the mean
        {
            "src/fedshare/engine/summary.py": ("personal_summary", "run_summary"),
            "src/fedshare/engine/kept_messages.py": (
                "KeptMessages.keep",
                "KeptMessages._forget_unheld",
                "KeptMessages.of",
                "KeptMessages.state_dict",
                "KeptMessages.load_state_dict",
                "_restore",
                "Inboxes.collect",
            ),
            "src/fedshare/engine/state_log.py": (
                "ClientStateLog.__init__",
                "ClientStateLog.save",
                "ClientStateLog.prune",
                "ClientStateLog.load",
                "ClientStateLog.clear",
            ),
            "src/fedshare/engine/aggregation.py": RUNNING_MEAN_FUNCTIONS,
            "src/fedshare/engine/messages.py": ("Update.aggregation_weight",),
        },
        f"{NO_CONFTEST} tests/test_mutation_engine_loop.py",
    ),
    "results_tables": Target(  # the report: runs grouped into rows, their cells, the paper's
        {
            "src/fedshare/results/grouping.py": (
                "flatten",
                "_flat",
                "run_value",
                "canon",
                "show",
                "listed",
                "_is_base",
                "_config_keys",
                "_varies",
                "_buckets",
                "split_keys",
                "Group.setting_label",
                "Group.label",
                "Group.seeds",
                "_sort_key",
                "group_runs",
                "notes_on",
            ),
            "src/fedshare/results/table.py": ("build_report", "short_labels", "accuracy_curves"),
            "src/fedshare/results/paper_match.py": (
                "PaperCell.delta",
                "_table_source",
                "load_paper",
                "_parse",
                "_same",
                "_agrees",
                "paper_cell",
            ),
            "src/fedshare/results/writers.py": (
                "_fmt",
                "table_rows",
                "markdown_table",
                "pivot_table",
                "_count",
                "to_markdown",
                "write_markdown",
                "_csv_cell",
                "write_csv",
                "_write_csv_rows",
            ),
            "src/fedshare/results/stats.py": ("report_stats",),
        },
        f"{NO_CONFTEST} {RESULTS_REST} -k 'not model and not machine'",
    ),
    "results_files": Target(  # run folders read and written, labels, the plots' numbers
        {
            "src/fedshare/results/runs.py": (
                "find_runs",
                "read_json",
                "_read_history",
                "_read_config",
                "load_run",
            ),
            "src/fedshare/results/rundir.py": (
                "_clean",
                "write_json",
                "RunDirectory.run_files",
                "RunDirectory.clear",
                "RunDirectory.mark",
                "RunDirectory.locked",
                "RunDirectory.metrics_path",
                "RunDirectory.checkpoint_path",
                "RunDirectory.write_config",
                "RunDirectory.write_partition",
                "RunDirectory.partition_written",
                "RunDirectory.write_summary",
                "RunDirectory.rewrite_metrics",
                "RunDirectory.append_metrics",
                "foreign_entries",
                "check_overwrite",
                "check_can_create",
                "check_run_folder",
                "read_metrics",
                "summarize",
                "validation_summary",
            ),
            "src/fedshare/results/labels.py": (
                "shown",
                "set_keys",
                "partition_label",
                "with_validation",
            ),
            "src/fedshare/results/atomic.py": (
                "temp_path",
                "atomic_write",
                "clean_temporaries",
                "png_complete",
            ),
            "src/fedshare/results/plots.py": (  # the numbers drawn, not the drawing
                "_number",
                "_round",
                "_series",
                "_traffic",
                "mean_curve",
                "single_round_lines",
            ),
        },
        f"{NO_CONFTEST} {RESULTS_REST} -k 'not model and not machine'",
    ),
    "results_model": Target(  # model.pt and the machine record of summary.json
        {
            "src/fedshare/results/model_file.py": (
                "save_model",
                "RawInputModel.__init__",
                "RawInputModel.prepare",
                "RawInputModel.forward",
                "load_model",
            ),
            "src/fedshare/results/machine.py": ("cpu_model", "build_version", "machine"),
        },
        f"{NO_CONFTEST} {RESULTS_REST} -k 'model or machine'",
    ),
    "reproduce_render": Target(  # a measured table's text and CSV (not the figure's drawing)
        {
            "src/fedshare/reproduce/render.py": (
                "method_name",
                "column_names",
                "_num",
                "measured_text",
                "stat_label",
                "summary_text",
                "stat_text",
                "within_text",
                "pivot",
                "long_rows",
                "tables_markdown",
                "_groups",
                "layout_markdown",
                "lists_markdown",
                "column_means",
                "_spread",
                "write_csv",
                "_csv_summary",
                "_cell_labels",
            ),
        },
        f"{NO_CONFTEST} {RESULTS_REST} -k 'not model and not machine'",
    ),
    "reproduce_jobs": Target(  # a table's cells and their overrides; the docs' blocks
        {
            "src/fedshare/reproduce/jobs.py": (
                "Cell.folder",
                "Job.columns",
                "Job.methods",
                "Job.metric",
                "Job.scale",
                "slug",
                "_key",
                "merged",
                "column_overrides",
                "_folder",
                "available_jobs",
                "_tuple",
                "_layout",
                "_scale",
                "load_job",
                "_match",
                "needed_data",
                "missing_data",
                "cost_s",
                "_pick",
                "scale_columns",
                "scale_methods",
                "runnable_methods",
                "cells",
            ),
            "src/fedshare/reproduce/docs.py": ("default_files", "block_text", "regenerate"),
        },
        f"{NO_CONFTEST} {RESULTS_REST} -k 'not model and not machine'",
    ),
    "config_rules": Target(  # the value rules and binding parameters to factories
        {
            "src/fedshare/config/rules.py": (
                "Rule.describe",
                "Rule._range",
                "Rule.accepts",
                "Rule._chosen",
                "Rule._in_range",
                "_show",
                "ruled",
            ),
            "src/fedshare/config/params.py": (
                "accepted_params",
                "type_ok",
                "type_text",
                "non_finite",
                "unknown_param_message",
                "check_params",
                "params_of",
            ),
        },
        f"{NO_CONFTEST} tests/test_mutation_config.py",
    ),
    "config_validation": Target(  # a bad value's sentence; what a resumed run may change
        {
            "src/fedshare/config/validation.py": (
                "rule_of",
                "typed_fields",
                "type_name",
                "value_problem",
                "close_choice",
                "command_line_fields",
                "command_line_problem",
                "check_key",
                "flat_values",
                "declared_fields",
                "check_fields",
                "check_typed",
                "check_combinations",
            ),
            "src/fedshare/config/resume.py": (
                "changeable",
                "resumed_config",
                "check_agreement",
                "touched",
                "unset",
                "recorded_label",
            ),
        },
        f"{NO_CONFTEST} tests/test_mutation_config.py",
    ),
    "config_overrides": Target(  # the command line's checks before Hydra composes
        {
            "src/fedshare/config/compose.py": (
                "override_args",
                "members",
                "composes",
                "sets_key",
                "fields_of_run",
                "run_keys_named",
            ),
            "src/fedshare/config/overrides.py": (
                "group_options",
                "values_of",
                "check_overrides",
                "check_typed_key",
            ),
        },
        f"{NO_CONFTEST} tests/test_mutation_config.py",
    ),
    "config_defaults": Target(  # the layered run defaults
        {
            "src/fedshare/config/defaults.py": (
                "resolve_train",
                "resolve_rounds",
                "global_default",
            ),
        },
        f"{NO_CONFTEST} tests/test_mutation_config.py -k 'defaults or rounds_default'",
    ),
    "config_run": Target(  # a whole run's check: typed keys, the four groups, the strategy
        {
            "src/fedshare/config/validation.py": (
                "check_simulation_config",
                "check_groups",
                "check_run",
            ),
        },
        f"{NO_CONFTEST} tests/test_mutation_config.py -k 'check_run or check_simulation'",
    ),
    "config_api": Target(  # Python's settings and the run's assembled config
        {
            "src/fedshare/config/api.py": ("as_config", "check_fields", "explicit_train"),
            "src/fedshare/config/assemble.py": ("model_name", "resolve_config"),
        },
        f"{NO_CONFTEST} tests/test_mutation_config.py -k 'api_settings or assemble_resolves'",
    ),
    "dcor": Target(  # FLea's distance correlation (Sec. 3.3.2, Eqs. 5 and 8) and its metric
        {
            "src/fedshare/privacy/dcor.py": (
                "_flatten",
                "squared_distances",
                "_safe_sqrt",
                "double_center",
                "_nu2",
                "_centred",
                "distance_correlation",
                "chunks",
                "mean_distance_correlation",
            ),
        },
        f"{NO_CONFTEST} tests/test_dcor.py"
        + "".join(
            f" tests/test_mutation_privacy.py::test_{name}"
            for name in (  # the definitions written out: no engine, no FLea
                "code_form_dcor_is_the_definition_with_the_codes_epsilons",
                "code_form_default_epsilon_is_the_codes_1e_minus_7",
                "paper_form_dcor_is_eq5_on_squared_or_plain_distances",
                "the_paper_forms_denominator_is_floored_at_epsilon",
                "two_samples_are_enough_and_one_is_refused",
                "a_constant_side_gives_zero_not_nan",
                "inputs_of_any_shape_are_flattened_per_sample_and_batch_dims_index_groups",
                "a_representation_of_another_dtype_is_compared_in_the_inputs_dtype",
                "squared_distances_and_centring_are_the_definitions_per_group",
                "a_zero_distance_has_a_zero_root_and_gradient_without_epsilon",
                "chunks_join_a_short_remainder_and_use_at_least_min_size",
                "the_metric_is_the_mean_over_every_clients_chunks_in_double_precision",
                "the_metrics_default_chunk_is_32_items",
            )
        ),
    ),
    "privacy_metrics": Target(  # exposure; XorMixFL's MDS (Sec. 4.2)
        {
            "src/fedshare/privacy/exposure.py": (
                "ExposureTracker.record_shared",
                "ExposureTracker.record_delivery",
                "ExposureTracker.pair_exposure",
                "ExposureTracker.data_fractions",
                "ExposureTracker.metrics",
                "expected_pair_exposure",
            ),
            "src/fedshare/privacy/mds.py": (
                "classical_mds",
                "min_contributor_distance",
                "distance_stats",
            ),
        },
        f"{NO_CONFTEST} tests/test_xormixfl.py::test_mds_metric"
        " tests/test_flea.py::test_directed_pair_exposure_follows_the_closed_form"
        " tests/test_flea.py::test_exposure_tracker_data_fractions_and_state"
        + "".join(
            f" tests/test_mutation_privacy.py::test_{name}"
            for name in (  # not a -k: it would deselect the other files' tests too
                "pair_exposure_is_directed_and_data_exposure_per_client",
                "classical_mds_keeps_the_largest_eigenvalues",
                "distance_stats_of_no_samples_are_nan_under_the_prefix",
                "a_tracker_of_no_clients_reports_zero_exposure",
                "one_client_of_one_sample_is_fully_exposed",
                "the_expected_pair_exposure_is_zero_before_the_second_round",
                "contributor_distances_are_taken_in_the_mds_embedding_only_when_dims_is_given",
            )
        ),
    ),
    "functional_rest": Target(  # functional/ functions no method entry lists
        {
            "src/fedshare/functional/calibration.py": (
                "relaxed_balanced_softmax_loss",  # ReBaFL's Eqs. 9-12
                "logit_adjustment",  # FedLC
                "restricted_logits",  # FedRS
            ),
            "src/fedshare/functional/gmm.py": (
                "check_covariance_type",
                "component_params",
                "pack_mixtures",
            ),
            "src/fedshare/functional/mixup.py": ("beta_weights",),
        },
        f"{NO_CONFTEST} "
        + " ".join(
            f"tests/test_{name}"
            for name in (
                "rebafl.py::test_rbsm_with_eps_one_is_plain_cross_entropy",
                "rebafl.py::test_rbsm_with_eps_zero_is_balanced_softmax_over_present_classes",
                "rebafl.py::test_one_class_client_bsm_loss_and_gradient_are_zero_but_not_under_rbsm",
                "rebafl.py::test_absent_class_row_is_frozen_by_bsm_and_pushed_less_by_rbsm_than"
                "_softmax",
                "rebafl.py::test_fedlc_offsets_and_fedrs_scaling",
                "rebafl.py::test_bad_calibration_values_are_rejected",
                "gmm.py::test_component_parameter_counts",
                "gmm.py::test_wire_round_trip_and_byte_count",
                "flea.py::test_beta_two_two_moments_and_per_batch_draws",
            )
        )
        + " tests/test_mutation_functional.py",
    ),
    # ---- the heterogeneous family (issue 45): clients with their own models
    "fedproto": Target(  # FedProto (Tan et al. 2022): count-weighted prototypes, Eq. 5's term
        {
            "src/fedshare/functional/prototypes.py": (
                "class_means",
                "feature_prototypes",
                "pack",
                "unpack",
                "PrototypeAverager.add",
                "PrototypeAverager.result",
            ),
            "src/fedshare/functional/prototype_losses.py": (
                "prototype_distance_loss",
                "prototype_distances",
                "nearest_prototype",
            ),
            "src/fedshare/strategies/fedproto.py": ("FedProto.local_step", "FedProto.absorb"),
        },
        "tests/test_fedproto.py",
    ),
    "fd": Target(  # FedDistill (Jeong et al. 2018): per-label logits, distillation toward them
        {
            "src/fedshare/functional/logit_sharing.py": ("label_logits", "label_distillation_loss"),
            "src/fedshare/strategies/feddistill.py": (
                "FedDistill.local_step",
                "FedDistill.uploaded",
                "FedDistill.absorb",
            ),
        },
        "tests/test_hetero_family.py -k 'label_distillation or fd_'",
    ),
    "lg_fedavg": Target(  # LG-FedAvg (Liang et al. 2020): the sample-weighted global head
        {
            "src/fedshare/strategies/lg_fedavg.py": (
                "load_head",
                "head_weights",
                "LGFedAvg.local_step",
                "LGFedAvg.uploaded",
                "LGFedAvg.absorb",
                "LGFedAvg.finish",
            ),
        },
        "tests/test_hetero_family.py -k 'lg_'",
    ),
    "fedgh": Target(  # FedGH (Yi et al. 2023): the header trained on prototypes alone
        {
            "src/fedshare/strategies/fedgh.py": (
                "FedGH.local_step",
                "FedGH.uploaded",
                "FedGH.absorb",
                "FedGH.finish",
            ),
            "src/fedshare/strategies/_server_training.py": (
                "prototype_batches",
                "train_on_prototypes",
            ),
        },
        "tests/test_fedgh_fedtgp.py -k 'fedgh_ or upload_holds or server_batches'",
    ),
    "fedtgp": Target(  # FedTGP (Zhang et al. 2024): trainable prototypes, the adaptive margin
        {
            "src/fedshare/functional/prototype_losses.py": ("class_gap", "margin_prototype_loss"),
            "src/fedshare/strategies/fedtgp.py": (
                "TrainableGlobalPrototypes.forward",
                "FedTGP.absorb",
                "FedTGP.global_prototypes",
            ),
        },
        "tests/test_fedgh_fedtgp.py -k 'gap or margin or fedtgp_ or upload_holds'",
    ),
    "fml": Target(  # FML (Shen et al. 2020): mutual learning, the averaged meme model
        {
            "src/fedshare/strategies/fml.py": ("mutual_loss", "FML.local_step", "FML.uploaded"),
            "src/fedshare/strategies/_shared_model.py": (
                "SharedModelStrategy.absorb",
                "SharedModelStrategy.finish",
            ),
            "src/fedshare/functional/logit_sharing.py": ("kl_to",),
        },
        "tests/test_fml_fedkd.py -k 'shared_model or kl_to or mutual_loss or fml_sends'",
    ),
    "fedkd": Target(  # FedKD (Wu et al. 2022): adaptive mutual distillation, SVD at energy T
        {
            "src/fedshare/functional/svd.py": (
                "energy_rank",
                "compress",
                "decompress",
                "energy_schedule",
            ),
            "src/fedshare/strategies/fedkd.py": (
                "factor_flat",
                "unfactor_flat",
                "adaptive_mutual_loss",
                "FedKD.local_step",
                "FedKD.uploaded",
                "FedKD.absorb",
            ),
        },
        "tests/test_fml_fedkd.py -k 'energy or low_rank or factored or adaptive or fedkd_'",
    ),
    "fedmrl": Target(  # FedMRL (Yi et al. 2024): the matryoshka representations
        {
            "src/fedshare/strategies/fedmrl.py": (
                "MRLNet.both",
                "matryoshka_loss",
                "FedMRL.local_step",
                "FedMRL.uploaded",
            ),
        },
        "tests/test_fedmrl.py",
    ),
    # ------------------------------------------------ engine/'s executors (ninth session)
    "engine_exec": Target(  # serial, batched and ranked executors: routing, order, the merge
        {
            "src/fedshare/engine/executors.py": (
                "RoundStats.add",
                "RoundStats.means",
                "Executor.agree",
                "Executor.on_writer",
                "Executor.run_phase",
                "Executor._begin",
                "Executor._updates",
                "Executor.steps",
                "Executor.deliver",
                "Executor.client",
                "Executor.received",
                "BatchedExecutor.__init__",
                "BatchedExecutor.steps",
                "BatchedExecutor._by_architecture",
                "RankedExecutor.__init__",
                "RankedExecutor.agree",
                "RankedExecutor.on_writer",
                "RankedExecutor.finish",
                "RankedExecutor.processes",
                "RankedExecutor.run_phase",
                "RankedExecutor._shared_updates",
                "RankedExecutor._shared_mean",
                "make_executor",
            ),
        },
        f"{NO_CONFTEST} "
        + " ".join(f"tests/test_mutation_engine_exec.py::test_{name}" for name in EXEC_TESTS),
    ),
    "engine_distributed": Target(  # the ranks' exchange: gather, pass along, the writer's value
        {
            "src/fedshare/engine/distributed.py": (
                "launched",
                "local_device",
                "process_group_backend",
                "to_bytes",
                "from_bytes",
                "RankGroup.__init__",
                "RankGroup.is_writer",
                "RankGroup.join",
                "RankGroup.settle",
                "RankGroup._collective",
                "RankGroup._exchange",
                "RankGroup.gather",
                "RankGroup.pass_along",
                "RankGroup._receive",
                "RankGroup.from_writer",
                "RankGroup.check_same",
                "rng_snapshot",
                "restore_rng",
                "_failure_code",
            ),
        },
        f"{NO_CONFTEST} "
        + " ".join(f"tests/test_mutation_engine_exec.py::test_{name}" for name in COLLECTIVE_TESTS),
    ),
    "engine_batched": Target(  # several clients' local training as one vmapped step
        {
            "src/fedshare/engine/batched.py": (
                "clip_rows",
                "StackedOptimizer.step",
                "StackedOptimizer._momentum",
                "StackedOptimizer._adam",
                "stacked",
                "StackedRun.__init__",
                "StackedRun.run",
                "StackedRun._groups",
                "StackedRun._step",
                "StackedRun.start_row",
                "StackedRun.load_client",
            ),
        },
        f"{NO_CONFTEST} "
        + " ".join(f"tests/test_mutation_engine_exec.py::test_{name}" for name in BATCHED_TESTS),
    ),
    "engine_client": Target(  # a client's data and streams, its wall, the run folder
        {
            "src/fedshare/engine/client.py": (
                "Client.__init__",
                "Client.num_samples",
                "Client.amp_device",
                "Client.lr",
                "Client.rng",
                "Client.make_optimizer",
                "Client._global",
                "Client.data",
                "Client.raw",
                "Client.labels",
                "Client.batches",
            ),
            "src/fedshare/engine/client_side.py": (
                "_sealed_class",
                "client_side",
                "on_client_side",
            ),
            "src/fedshare/engine/run_folder.py": (
                "cut_metrics",
                "RunFolder._open",
                "RunFolder._stored_summary",
                "RunFolder._states_inline",
                "RunFolder.begin",
                "RunFolder.save_checkpoint",
                "RunFolder.write_results",
                "RunFolder.cut_back",
                "RunFolder.write_failure",
            ),
        },
        f"{NO_CONFTEST} "
        + " ".join(f"tests/test_mutation_engine_rest.py::test_{name}" for name in RUN_FOLDER_TESTS)
        + " "
        + " ".join(f"tests/test_mutation_engine_exec.py::test_{name}" for name in CLIENT_TESTS),
    ),
    "privacy_context": Target(  # FLea's context-identification attack (Sec. 4.4, App. D, Fig. 9(d))
        {
            "src/fedshare/privacy/context.py": (
                "check_images",
                "stamp",
                "ContextAttack.samples_for",
                "classifier",
                "context_attack",
                "train_classifier",
                "_examples",
                "_view",
                "check_run_attack",
                "run_attack_summary",
            ),
        },
        f"{NO_CONFTEST}"
        + "".join(
            f" tests/test_mutation_privacy_rest.py::test_{name}"
            for name in (  # fastest first
                "images_of_at_least_7x7_with_channels_are_accepted",
                "other_shapes_are_refused_naming_the_shape",
                "the_stamp_is_full_intensity_at_2_7_in_channel_zero_only",
                "samples_for_is_the_smallest_size_reaching_the_target",
                "the_classifier_is_four_linear_layers_512_256_128_2_with_relus",
                "a_run_attack_needs_a_sharing_strategy_images_and_sizes_of_at_least_two",
                "the_run_summary_rounds_to_two_places_and_reads_off_90_percent",
                "the_attacks_defaults_are_figure_9ds_setting",
                "examples_mark_the_first_half_every_image_of_a_group_and_no_other",
                "views_are_the_first_image_the_groups_mean_or_the_eval_mode_activations",
                "views_normalise_each_image_by_its_own_channels",
                "the_features_view_needs_the_model_and_runs_with_it",
                "a_classifier_that_cannot_learn_scores_the_share_it_gets_right",
                "the_attacker_reads_the_marker_off_raw_images_and_scores_in_percent",
                "train_classifier_is_adam_on_cross_entropy_one_step_per_batch_per_epoch",
            )
        ),
    ),
    "privacy_reconstruction": Target(  # FLea's reconstruction attack (Sec. 4.4, App. D, Fig. 9(c))
        {
            "src/fedshare/privacy/reconstruction.py": (
                "table5_decoder",
                "DenseDecoder.__init__",
                "DenseDecoder.forward",
                "unnormalised",
                "activations",
                "AttackResult.relative_test_mse",
                "ridge_decoder",
                "reconstruction_attack",
            ),
        },
        f"{NO_CONFTEST}"
        + "".join(
            f" tests/test_mutation_privacy_rest.py::test_{name}"
            for name in (  # fastest first
                "the_relative_error_is_the_test_error_over_the_baselines",
                "the_reconstruction_defaults_are_figure_9cs_setting",
                "unnormalised_inputs_are_the_stored_ones_times_the_scale_as_floats",
                "the_dense_decoder_is_one_linear_map_reshaped_to_the_input",
                "table5_decoder_is_the_papers_stack_and_keeps_the_spatial_size",
                "activations_are_the_eval_mode_encoding_in_chunks_and_the_mode_is_restored",
                "the_attack_refuses_an_unknown_decoder_and_a_model_without_a_split",
                "ridge_is_the_centred_primal_solution_with_the_least_leave_one_out_penalty",
                "ridge_attack_decodes_the_split_activations_of_the_drawn_samples",
                "sizes_are_capped_at_the_data",
                "a_frozen_decoder_reports_its_initial_error_every_epoch",
                "the_dense_decoder_learns_and_no_epoch_reports_nan",
            )
        ),
    ),
    "functional_transfer": Target(  # the host-to-device copy staged through pinned memory
        {"src/fedshare/functional/transfer.py": ("to_device",)},
        f"{NO_CONFTEST} tests/test_mutation_privacy_rest.py -k copy",
    ),
    # ------------------------------------------- data/ (tenth session: tests/test_mutation_data.py)
    "data_federated": Target(  # the clients' split, the server's data, the validation split
        {
            "src/fedshare/data/federated.py": (
                "FederatedData.__repr__",
                "FederatedData.server_batch",
                "FederatedData.num_clients",
                "FederatedData.client_sizes",
                "FederatedData.validation_batches",
                "FederatedData.to",
                "resolve_num_clients",
                "federate",
                "carve_server_data",
                "with_server_data",
            ),
            "src/fedshare/data/validation.py": (
                "check_val_fraction",
                "held_out",
                "carve_validation",
            ),
        },
        f"{NO_CONFTEST} tests/test_mutation_data.py"
        " -k 'val or held_out or federat or carve or resolve or server'",
    ),
    "data_dataset": Target(  # a batch's scaling, normalisation and augmentation; the loaders'
        {  # shared options: labels checked, classes and subsets drawn, the synthetic clusters
            "src/fedshare/data/dataset.py": (
                "Augmentation.active",
                "Dataset.input_shape",
                "Dataset.device",
                "Dataset.to",
                "Dataset.prepare",
                "Dataset.train_batch",
                "channel_constant",
                "augment_batch",
            ),
            "src/fedshare/data/datasets.py": (
                "check_generated_sizes",
                "check_labels",
                "load_dataset",
                "with_statistics",
                "keep_classes",
                "balanced_subset",
                "load_synthetic",
            ),
        },
        f"{NO_CONFTEST} tests/test_mutation_data.py"
        " -k 'augment or prepare or channel or check_ or statistics or keep_classes"
        " or balanced or load_'",
    ),
    "data_cache": Target(  # the processed-tensor cache: its key, entries, rebuild, write failure
        {
            "src/fedshare/data/cache.py": (
                "cache_dir",
                "source_signature",
                "cache_key",
                "cache_path",
                "read_entry",
                "cached",
                "dataset_from_payload",
            ),
        },
        f"{NO_CONFTEST} tests/test_mutation_data.py -k 'cache or payload'",
    ),
    "data_files": Target(  # a file's checks and sentences; the data roots searched
        {
            "src/fedshare/data/files.py": (
                "corrupt_file",
                "gzip_problem",
                "not_a_file",
                "require_regular_file",
                "read_bytes",
                "read_text",
                "check_npz_sizes",
                "npz_arrays",
                "npz_problem",
                "read_npz",
            ),
            "src/fedshare/data/sources.py": (
                "checked_root",
                "data_roots",
                "find_files",
                "missing_data_error",
            ),
        },
        f"{NO_CONFTEST} tests/test_mutation_data.py"
        " -k 'gzip or not_a_file or read_bytes or npz or roots'",
    ),
    "data_features": Target(  # a frozen backbone's inputs, batches, options and cache key
        {
            "src/fedshare/data/features.py": (
                "Extractor.prepare",
                "random_relu_backbone",
                "tensor_digest",
                "resolve_device",
                "run_backbone",
                "backbone_options",
                "extract_features",
            ),
        },
        f"{NO_CONFTEST} tests/test_mutation_data.py -k 'extractor or random_relu or digest"
        " or run_backbone or backbone_options or with_features or extract_features'",
    ),
    "engine_rest": Target(  # architectures, the clock, progress, held signals, resources, device
        {
            "src/fedshare/engine/architectures.py": (
                "ClientModels.index",
                "ClientModels.name_of",
                "model_entries",
                "_labels",
                "assign_architectures",
                "_position",
                "_takes_feature_dim",
                "build_client_models",
                "takes_client_models",
                "refuse_strategy",
                "Architectures.worker_of",
                "client_architectures",
            ),
            "src/fedshare/engine/device.py": ("uses_channels_last", "resolve_device"),
            "src/fedshare/engine/setup.py": ("set_up",),
            "src/fedshare/engine/signals.py": ("signal_name", "held_signals"),
            "src/fedshare/engine/clock.py": (
                "RunClock.__init__",
                "RunClock.start",
                "RunClock.continue_from",
                "RunClock.stop",
                "RunClock.elapsed",
                "RunClock.cpu_time",
            ),
            "src/fedshare/engine/client.py": ("Client.batches",),
            "src/fedshare/engine/memory.py": ("peak_memory", "cpu_seconds", "command_seconds"),
            "src/fedshare/engine/progress.py": (
                "megabytes",
                "Progress.__init__",
                "Progress.stage",
                "Progress.update",
                "Progress._round_tag",
                "Progress._postfix",
                "Progress._print",
            ),
            "src/fedshare/engine/result.py": (
                "RunResult.accuracies",
                "RunResult.final_accuracy",
                "RunResult.best_accuracy",
            ),
        },
        f"{NO_CONFTEST} tests/test_mutation_engine_rest.py",
    ),
    # ----------------------- what earlier entries left unlisted (eleventh session, mutrest)
    "data_rest": Target(  # covariate-shift specs and domains, describe, coverage, the α check
        {
            "src/fedshare/data/shift.py": (
                "check_transform",
                "transform_name",
                "apply_domain_shift",
            ),
            "src/fedshare/data/partitioners.py": ("Partition.describe",),
            "src/fedshare/data/pathological.py": ("label_set_coverage",),
            "src/fedshare/data/label_skew.py": ("_check_alpha",),
        },
        f"{NO_CONFTEST} tests/test_mutation_rest.py",
    ),
    "engine_small": Target(  # stacked rows and optimizer slots; kept messages; traffic record
        {
            "src/fedshare/engine/batched.py": (
                "grad_of",
                "StackedOptimizer._steps",
                "StackedOptimizer._slot",
                "_LossOf.__init__",
                "_LossOf.forward",
                "stacked",
                "StackedRun.__init__",
                "StackedRun.start_row",
                "StackedRun.load_client",
            ),
            "src/fedshare/engine/kept_messages.py": (
                "KeptMessages.bytes_held",
                "_stored_bytes",
                "_message_state",
                "Inboxes.post",
                "Inboxes.bytes_held",
                "Inboxes.state_dict",
                "Inboxes.load_state_dict",
            ),
            "src/fedshare/engine/executors.py": ("Executor._local_separability",),
            "src/fedshare/engine/accounting.py": ("Traffic.as_dict",),
        },
        f"{NO_CONFTEST} tests/test_mutation_rest.py",
    ),
    # ------------------------- the functions left unlisted (eleventh session, mutsmall)
    "reproduce_stored": Target(  # reproduce's cells from run folders or a stored file
        {
            "src/fedshare/reproduce/measure.py": (
                "measure",
                "_read_name",
                "_per_seed",
                "load_stored",
                "write_stored",
                "_add_stored",
                "stored_cells",
            ),
        },
        f"{NO_CONFTEST} tests/test_mutation_small.py -k '{REPRODUCE_STORED_TESTS}'",
    ),
    "library_small": Target(  # the small functions no other entry lists
        {
            "src/fedshare/data/files.py": ("available_memory",),
            "src/fedshare/data/label_skew.py": ("_num_classes",),
            "src/fedshare/data/pathological.py": ("_num_classes",),
            "src/fedshare/privacy/dp.py": ("_phi",),
            "src/fedshare/privacy/exposure.py": (
                "ExposureTracker.__init__",
                "ExposureTracker.num_clients",
                "ExposureTracker.state_dict",
                "ExposureTracker.load_state_dict",
            ),
            "src/fedshare/functional/gmm.py": (
                "GaussianMixture.n_components",
                "GaussianMixture.dim",
                "GaussianMixture.num_params",
            ),
            "src/fedshare/functional/class_gaussians.py": ("PooledClassGaussians.__init__",),
            "src/fedshare/functional/prototypes.py": ("PrototypeAverager.__init__",),
            "src/fedshare/results/rundir.py": ("RunDirectory.__init__",),
            "src/fedshare/engine/checkpoint.py": ("unreadable_checkpoint",),
            "src/fedshare/engine/client.py": (
                "Client.device",
                "Client.num_classes",
                "Client.scale",
                "Client.prepare",
            ),
            "src/fedshare/engine/client_state.py": (
                "ClientStates.__init__",
                "ClientStates.get",
                "ClientStates.items",
            ),
            "src/fedshare/engine/progress.py": ("Progress.close",),
            "src/fedshare/engine/run_folder.py": (
                "RunFolder.__init__",
                "RunFolder.dir",
                "RunFolder.open",
            ),
            "src/fedshare/engine/executors.py": (
                "Executor.__init__",
                "Executor.processes",
                "RankedExecutor._updates",
            ),
            "src/fedshare/engine/distributed.py": ("RankGroup.close",),
            "src/fedshare/engine/simulation.py": (
                "Simulation._setup",
                "Simulation.save_checkpoint",
                "Simulation.elapsed",
                "Simulation.cpu_time",
                "Simulation.summary",
                "Simulation._default_record",
            ),
        },
        f"{NO_CONFTEST} tests/test_mutation_small.py -k 'not ({REPRODUCE_STORED_TESTS})'",
    ),
    # ------------------------------------------------ FedPFT's GMMs again (eleventh session)
    "functional_gmm": Target(  # fedpft's gmm.py functions, fast: the GMM tests, then FedPFT's
        {
            "src/fedshare/functional/gmm.py": FEDPFT_GMM_FUNCTIONS,
        },
        f"{NO_CONFTEST} "
        + " ".join(
            f"tests/test_gmm.py::test_{name}"
            for name in (
                "em_steps_from_the_kmeans_start_and_stops_on_tol_or_max_iter",
                "single_component_is_the_closed_form",
                "fit_is_determined_by_the_generator",
                "too_few_samples_is_a_clear_error",
                "sampling_reproduces_the_moments",
                "a_singular_full_covariance_samples_finite_points_on_its_line",
                "a_single_sample_fits_one_component_at_it",
                "mixture_counts_follow_the_weights",
                "wire_round_trip_and_byte_count",
                "float16_weights_are_renormalised_and_covariances_sanitised",
                "point_mass_for_a_single_sample",
                "point_mass_is_one_component_at_the_mean_with_variance_reg_covar",
                "server_sanitation_clamps_negative_weights_and_spreads_a_zero_total",
                "component_parameter_counts",
                "kmeans_seeds_by_squared_distance_then_assigns_each_point_to_its_nearest_seed",
                "em_with_no_iteration_returns_the_kmeans_start",
                "kmeans_runs_lloyds_steps_from_the_seeds_until_no_label_changes",
                "a_payload_whose_lists_disagree_in_length_is_refused",
                "m_step_adds_ten_machine_epsilons_to_each_components_mass",
                "a_variance_below_zero_by_rounding_is_clamped_to_zero",
                "em_runs_a_hundred_iterations_by_default_and_kmeans_a_hundred_steps",
                "sampling_draws_the_counts_then_each_components_gaussian_noise",
                "one_component_is_fitted_in_closed_form_and_reported_converged",
                "sampling_clamps_negative_weights_and_variances_to_zero",
                "em_matches_scikit_learn_likelihood",
            )
        )
        + " "
        + FEDPFT_GMM_TESTS,
    ),
    # ------------------------ the image loaders (eleventh session: test_mutation_data_images.py)
    "data_images": Target(  # IDX, CIFAR pickles and npz, static augmentation, digits, mixtures
        {
            "src/fedshare/data/pickles.py": (
                "_latin1_bytes",
                "pickle_problem",
                "load_cifar_pickle",
            ),
            "src/fedshare/data/images.py": (
                "idx_dims",
                "read_idx",
                "read_idx_split",
                "load_idx_dataset",
                "load_mnist",
                "load_fmnist",
                "_entry",
                "_names",
                "read_cifar_batches",
                "read_cifar_npz",
                "_read_npz_split",
                "apply_static_augment",
                "_cifar10_pickles",
                "_cifar10_npz",
                "_cifar10_dataset",
                "load_cifar10",
                "load_cifar10_sample",
                "load_cifar100",
            ),
            "src/fedshare/data/synthetic_features.py": ("load_synthetic_mixture",),
            "src/fedshare/data/datasets.py": ("sklearn_digits_file", "load_digits"),
        },
        f"{NO_CONFTEST} tests/test_mutation_data_images.py",
    ),
    "data_signals": Target(
        {
            "src/fedshare/data/wav.py": (
                "riff_chunks",
                "to_float",
                "decode_ima_adpcm",
                "_read_with_backend",
                "check_wav_header",
                "read_wav",
            ),
            "src/fedshare/data/audio.py": (
                "SpectrogramConfig.length",
                "SpectrogramConfig.hop",
                "SpectrogramConfig.shape",
                "spectrogram_config",
                "fit_clip",
                "_masks",
                "spectrograms",
                "audio_payload",
                "random_test_mask",
                "load_urbansound8k",
                "load_fsdd",
                "_download_fsdd",
            ),
            "src/fedshare/data/sensors.py": (
                "read_matrix",
                "existing_text_file",
                "_split_files",
                "find_uci_har",
                "uci_har_source",
                "read_uci_har_split",
                "load_uci_har",
                "_download_uci_har",
            ),
            "src/fedshare/data/feature_files.py": (
                "resolve_path",
                "read_features_file",
                "_pick",
                "load_one",
                "declared_classes",
                "load_features_file",
                "contiguous",
            ),
        },
        f"{NO_CONFTEST} tests/test_mutation_data_signals.py",
    ),
}
"""docs/mutation.md says how much of each entry has been run and which methods have no entry."""


def function_lines(path: Path, names: tuple[str, ...]) -> list[tuple[int, int]]:
    """(first, last) line of each named function (`Class.method` or `function`)."""
    found: dict[str, tuple[int, int]] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                found[prefix + child.name] = (child.lineno, child.end_lineno or child.lineno)

    visit(ast.parse(path.read_text()), "")
    missing = [n for n in names if n not in found]
    if missing:
        raise SystemExit(f"{path}: no function {', '.join(missing)}; valid: {sorted(found)}")
    return [found[n] for n in names]


def copy_tree(destination: Path) -> None:
    """The checkout's tracked and untracked (not ignored) files."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


MutantKey = tuple[str, str, int]
"""(module, operator, occurrence): one mutant of an unchanged module."""


def skip_outside(
    session: Path, module: str, ranges: list[tuple[int, int]], done: set[MutantKey]
) -> int:
    """Mark the session's mutants outside `ranges`, or in `done`, skipped; the number kept."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    skipped, kept = [], 0
    with use_db(str(session), WorkDB.Mode.open) as db:
        for item in db.pending_work_items:
            lines = [(m.start_pos[0], m.end_pos[0]) for m in item.mutations]
            operators = {m.operator_name.split("/")[-1] for m in item.mutations}
            inside = operators <= set(KEPT_OPERATORS) and all(
                any(first <= start and end <= last for first, last in ranges)
                for start, end in lines
            )
            first = item.mutations[0]
            if inside and (module, first.operator_name, first.occurrence) not in done:
                kept += 1
            else:
                skipped.append(item.job_id)
        if skipped:
            result = WorkResult(
                output=f"outside {module}'s core or run before",
                worker_outcome=WorkerOutcome.SKIPPED,
            )
            db.set_multiple_results(skipped, result)
    return kept


def done_mutants(records: list[Path]) -> set[MutantKey]:
    """The mutants of earlier runs' `<method>.json` records (to finish a stopped run)."""
    return {
        (row["module"], row["operator"], row["occurrence"])
        for record in records
        for row in json.loads(record.read_text())["mutants"]
    }


def results(session: Path) -> tuple[list[dict], int]:
    """The session's mutants run (skipped ones left out) and the number not run yet."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome

    rows = []
    with use_db(str(session), WorkDB.Mode.open) as db:
        for item, result in db.completed_work_items:
            if result.worker_outcome == WorkerOutcome.SKIPPED:
                continue
            mutation = item.mutations[0]
            rows.append(
                {
                    "module": str(mutation.module_path),
                    "line": mutation.start_pos[0],
                    "operator": mutation.operator_name,
                    "occurrence": mutation.occurrence,
                    "outcome": "killed" if result.is_killed else "survived",
                    "worker": str(result.worker_outcome.value),
                    "diff": result.diff,
                }
            )
        pending = sum(1 for _ in db.pending_work_items)
    return rows, pending


def sessions_of(name: str, out: Path) -> Path:
    """The folder of a method's cosmic-ray session databases (one per module)."""
    return out / f"{name}-sessions"


def collect(name: str, target: Target, out: Path) -> None:
    """Write `<out>/<method>.json` from the method's session databases: the mutants run so
    far (a stopped run's are a random sample: cosmic-ray runs a session in random order) and,
    per module, the number not run."""
    rows: list[dict] = []
    not_run: dict[str, int] = {}
    for i, module in enumerate(target.modules):
        session = sessions_of(name, out) / f"mutation-{i}.sqlite"
        if session.exists():
            done, not_run[module] = results(session)
            rows += done
    record = {
        "method": name,
        "tests": target.tests,
        "modules": target.modules,
        "not_run": not_run,
        "mutants": rows,
    }
    (out / f"{name}.json").write_text(json.dumps(record, indent=1))
    killed = sum(r["outcome"] == "killed" for r in rows)
    print(f"{name}: {killed} / {len(rows)} mutants killed; not run: {not_run}", flush=True)
    for r in rows:
        if r["outcome"] == "survived":
            print(f"  survived {r['module']}:{r['line']} {r['operator']}\n{r['diff']}")


def run_method(name: str, target: Target, out: Path, timeout: float, done: set[MutantKey]) -> None:
    env = {**os.environ, **TEST_ENV}
    cosmic_ray = Path(sys.executable).with_name("cosmic-ray")
    sessions = sessions_of(name, out)
    shutil.rmtree(sessions, ignore_errors=True)
    sessions.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix=f"mutation-{name}-") as scratch:
        work = Path(scratch)
        copy_tree(work)
        env["PYTHONPATH"] = str(work / "src")
        command = f"{PYTEST} {target.tests}"
        baseline = subprocess.run(command, shell=True, cwd=work, env=env, capture_output=True)
        if baseline.returncode != 0:
            raise SystemExit(
                f"{name}: the unmutated tests fail:\n{baseline.stdout.decode()[-2000:]}"
            )
        for i, (module, functions) in enumerate(target.modules.items()):
            config = work / f"mutation-{i}.toml"
            config.write_text(
                "[cosmic-ray]\n"
                f'module-path = "{module}"\n'
                f"timeout = {timeout}\n"
                "excluded-modules = []\n"
                f"test-command = {json.dumps(command)}\n"
                '[cosmic-ray.distributor]\nname = "local"\n'
            )
            session = (sessions / f"mutation-{i}.sqlite").resolve()
            subprocess.run([cosmic_ray, "init", config, session], cwd=work, env=env, check=True)
            ranges = function_lines(work / module, functions)
            kept = skip_outside(session, module, ranges, done)
            print(f"{name}: {module}: {kept} mutants in {', '.join(functions)}", flush=True)
        for i in range(len(target.modules)):
            session = (sessions / f"mutation-{i}.sqlite").resolve()
            subprocess.run(
                [cosmic_ray, "exec", work / f"mutation-{i}.toml", session],
                cwd=work,
                env=env,
                check=True,
            )
    collect(name, target, out)


def recheck_method(name: str, target: Target, out: Path, timeout: float) -> None:
    """Run the survivors of `<out>/<method>.json` again against the current tests (after new
    tests were written for them); a mutant now killed is marked `killed` and `rechecked`."""
    path = out / f"{name}.json"
    record = json.loads(path.read_text())
    cosmic_ray = Path(sys.executable).with_name("cosmic-ray")
    with tempfile.TemporaryDirectory(prefix=f"mutation-{name}-") as scratch:
        work = Path(scratch)
        copy_tree(work)
        env = {**os.environ, **TEST_ENV, "PYTHONPATH": str(work / "src")}
        command = f"{PYTEST} {target.tests}"
        for row in record["mutants"]:
            if row["outcome"] != "survived":
                continue
            args = [cosmic_ray, "mutate-and-test", row["module"], row["operator"]]
            done = subprocess.run(
                [*args, str(row["occurrence"]), command],
                cwd=work,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            if json.loads(done.stdout)["test_outcome"] != "survived":
                row.update(outcome="killed", rechecked=True)
            print(f"{name}: {row['module']}:{row['line']} {row['operator']}: {row['outcome']}")
    record["recheck_tests"] = target.tests
    path.write_text(json.dumps(record, indent=1))


def report(out: Path) -> None:
    print("| method | functions mutated | mutants | killed | kill rate | survivors |")
    print("|---|---|---|---|---|---|")
    for name, target in METHODS.items():
        path = out / f"{name}.json"
        if not path.exists():
            print(f"| {name} | not run | | | | |")
            continue
        rows = json.loads(path.read_text())["mutants"]
        killed = sum(r["outcome"] == "killed" for r in rows)
        functions = ", ".join(f for fs in target.modules.values() for f in fs)
        survivors = ", ".join(
            f"{Path(r['module']).name}:{r['line']}" for r in rows if r["outcome"] == "survived"
        )
        rate = 100 * killed / max(len(rows), 1)
        print(f"| {name} | {functions} | {len(rows)} | {killed} | {rate:.0f} % | {survivors} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("methods", nargs="*", help=f"default: all of {', '.join(METHODS)}")
    parser.add_argument("--out", type=Path, default=Path("runs/mutation"))
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per mutant")
    parser.add_argument("--report", action="store_true")
    parser.add_argument(
        "--only", nargs="+", metavar="FUNCTION", help="run only these of the method's functions"
    )
    parser.add_argument(
        "--recheck", action="store_true", help="run only the survivors again (after new tests)"
    )
    parser.add_argument(
        "--collect",
        action="store_true",
        help="write <out>/<method>.json from a stopped run's session databases",
    )
    parser.add_argument(
        "--skip-done",
        nargs="+",
        type=Path,
        default=[],
        metavar="JSON",
        help="leave out the mutants of these earlier records (the modules unchanged since)",
    )
    args = parser.parse_args()
    if args.report:
        report(args.out)
        return
    unknown = [m for m in args.methods if m not in METHODS]
    if unknown:
        raise SystemExit(f"unknown method {unknown[0]!r}; valid: {', '.join(METHODS)}")
    done = done_mutants(args.skip_done)
    for name in args.methods or list(METHODS):
        target = restricted(METHODS[name], args.only)
        if args.collect:
            collect(name, target, args.out)
        elif args.recheck:
            recheck_method(name, target, args.out, args.timeout)
        else:
            run_method(name, target, args.out, args.timeout, done)


def restricted(target: Target, only: list[str] | None) -> Target:
    """`target` with only the functions named in `only` (all when None)."""
    if not only:
        return target
    modules = {
        module: kept
        for module, functions in target.modules.items()
        if (kept := tuple(f for f in functions if f in only))
    }
    unknown = set(only) - {f for fs in modules.values() for f in fs}
    if unknown:
        raise SystemExit(f"not a function of the method: {', '.join(sorted(unknown))}")
    return Target(modules, target.tests)


if __name__ == "__main__":
    main()
