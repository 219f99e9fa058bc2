"""What both tiers of the baseline tests share: ``BASELINE``, ``ALSO_SHOWS``, ``UNEXPLAINED``, ``stem``."""

from __future__ import annotations

from pathlib import Path

from harness.fuzzing.baseline import load_baseline

BASELINE = load_baseline()


#: What each baseline case shows besides its own entries, reviewed: the entries the baseline
#: attributes its other findings to. Every one is the same cause as the entry named (a burn or
#: candle behaviour the case's program also exercises on the way to its own divergence). A new
#: attribution here means an entry matched a finding it was not written for: too broad an entry
#: hides a new cause behind a known one, and a campaign's "0 new" would be wrong.
ALSO_SHOWS = {
    "assign_from_a_transposed_snapshot": {"burn-tensors-are-values"},
    "batch_norm_running_stats_across_clone_save_and_eval": {
        "candle-module-clone-shares-vars",
        "candle-varmap-entry-is-the-var",
        "candle-varmap-set-refuses-its-own-vars",
    },
    "burn_assign_between_backends": {"candle-slice-set-refuses-assign-whole"},
    "burn_backward_over_a_written_clone_fails": {"candle-clone-shares-storage"},
    "burn_layer_refuses_an_input_on_the_other_cpu_backend": {"burn-running-state-lags-one-update-and-is-biased"},
    "burn_module_clone_shares_running_state": {
        "burn-paramid-is-not-object-identity",
        "burn-running-state-lags-one-update-and-is-biased",
        "candle-module-clone-shares-vars",
    },
    "burn_move_initialises_a_lazy_param_a_clone_shares": {"burn-paramid-is-not-object-identity"},
    "burn_param_map_takes_the_tensors_tracking": {
        "burn-paramid-is-not-object-identity",
        "candle-module-clone-shares-vars",
    },
    "burn_running_stats_move_at_a_mode_change": {"burn-paramid-is-not-object-identity"},
    "burn_snapshot_before_a_move_makes_train_refuse": {"burn-train-after-to-device-fails"},
    "burn_tied_params_in_a_module_clone": {"burn-paramid-is-not-object-identity", "candle-module-clone-shares-vars"},
    "burn_unused_module_clone_stops_a_moved_lazy_training": {
        "burn-paramid-is-not-object-identity",
        "burn-to-device-does-not-train",
        "candle-module-clone-shares-vars",
    },
    "burn_valid_train_applies_the_pending_running_update": {
        "burn-paramid-is-not-object-identity",
        "burn-running-state-lags-one-update-and-is-biased",
        "candle-module-clone-shares-vars",
    },
    "burn_valid_train_unshares_a_module_clones_running_state": {
        "burn-paramid-is-not-object-identity",
        "burn-running-state-lags-one-update-and-is-biased",
        "candle-module-clone-shares-vars",
    },
    "candle_batch_norm_output_is_a_transposed_view": {"burn-running-state-lags-one-update-and-is-biased"},
    "candle_detach_of_a_clone_writes_into_the_source": {"candle-clone-shares-storage"},
    "candle_param_replaced_from_a_clone_is_the_old_var": {"candle-clone-shares-storage"},
    "candle_reinstalled_var_is_still_trained": {"burn-optimizer-trains-what-the-module-holds"},
    "candle_reshape_of_a_clone_writes_into_the_source": {"candle-clone-shares-storage"},
    "candle_reshape_of_a_strided_tensor_copies": {"burn-tensors-are-values", "candle-clone-shares-storage"},
    "candle_reused_var_is_one_parameter": {"candle-var-from-tensor-reuses-a-var"},
    "candle_trains_a_param_torch_froze": {"candle-clone-shares-storage"},
    "candle_transposed_row_write": {"burn-tensors-are-values"},
    "candle_transposed_whole_write": {"burn-tensors-are-values"},
    "candle_varmap_entry_is_the_var": {"burn-paramid-is-not-object-identity"},
    "dropout_returns_its_input": {"burn-tensors-are-values"},
    "kv_cache_append_of_a_transposed_view": {"candle-clone-shares-storage"},
    "methods_across_step": {
        "burn-paramid-is-not-object-identity",
        "candle-clone-shares-storage",
        "torch-compile-traces-numpy-into-a-view-with-the-sources-version-counter",
        "torch-tensors-over-one-storage-keep-their-own-version-counters",
    },
    "nn_parameter_shares_storage": {"burn-tensors-are-values"},
    "state_dict_best_weights_follow_training": {"burn-paramid-is-not-object-identity", "burn-tensors-are-values"},
    "torch_backward_over_a_checkpoint_entry_is_refused": {
        "burn-paramid-is-not-object-identity",
        "candle-memory-checkpoint-is-the-vars",
        "torch-refuses-a-backward-over-a-tensor-outside-autograd",
    },
    "torch_checkpoint_holds_buffers": {"burn-paramid-is-not-object-identity"},
    "torch_data_of_a_view_write_between_two_backward_passes": {"torch-data-is-outside-the-version-counter"},
    # and the clamp saved w and the detach's write changed it in one compiled run of torch:cpu+graph
    "torch_detach_write_is_seen_by_autograd": {
        "burn-tensors-are-values",
        "torch-compile-checks-saved-tensors-when-it-compiles",
    },
    "torch_graph_write_into_a_tensor_its_graph_saved_fails_when_it_compiles": {"burn-tensors-are-values"},
    "torch_chunk_unusable_after_an_in_place_step": {"burn-tensors-are-values"},
    "torch_file_checkpoint_keeps_shared_storage": {
        "burn-paramid-is-not-object-identity",
        "torch-tensors-over-one-storage-keep-their-own-version-counters",
    },
    "torch_file_checkpoint_sharing_seen_by_a_snapshot": {
        "burn-paramid-is-not-object-identity",
        "candle-var-from-tensor-reuses-a-var",
        "torch-tensors-over-one-storage-keep-their-own-version-counters",
    },
    "torch_host_round_trip_of_an_expanded_view_keeps_its_strides": {
        "burn-tensors-are-values",
        "torch-numpy-round-trip-shares-on-cpu",
        "torch-tensors-over-one-storage-keep-their-own-version-counters",
    },
    "torch_load_refuses_an_entry_overlapping_its_parameter": {
        "burn-paramid-is-not-object-identity",
        "candle-memory-checkpoint-is-the-vars",
        "torch-data-assignment-keeps-the-version-counter",
    },
    "torch_load_through_a_transposed_parameter_rearranges_what_shares_it": {
        "burn-paramid-is-not-object-identity",
        "candle-memory-checkpoint-is-the-vars",
        "torch-data-assignment-keeps-the-version-counter",
    },
    "torch_load_assign_takes_the_checkpoints_tensors": {
        "burn-paramid-is-not-object-identity",
        "candle-memory-checkpoint-is-the-vars",
    },
    "torch_load_writes_through_shared_storage": {
        "burn-paramid-is-not-object-identity",
        "torch-data-assignment-keeps-the-version-counter",
    },
    "torch_param_over_its_snapshot_takes_the_snapshots_writes": {
        "burn-tensors-are-values",
        "torch-data-assignment-keeps-the-version-counter",
        "torch-data-assignment-keeps-the-version-counter-of-later-writes",
    },
    "torch_parameter_over_an_expansion_refuses_a_write": {
        "burn-param-from-tensor-refuses-a-non-leaf",
        "candle-clone-shares-storage",
    },
    "torch_step_moves_the_tensor_a_new_parameter_was_made_of": {"burn-param-from-tensor-refuses-a-non-leaf"},
    "burn_load_restores_the_records_param_ids": {
        "burn-paramid-is-not-object-identity",
        "candle-memory-checkpoint-is-the-vars",
        "candle-varmap-set-refuses-its-own-vars",
    },
    "torch_step_moves_the_checkpoint_entry_a_parameter_was_made_of": {"burn-paramid-is-not-object-identity"},
    # eager torch refuses the bf16 numpy round trip (as candle and burn do not); compiled torch
    # traces it as torch, one cause each way
    "torch_compile_traces_numpy_so_a_bf16_host_round_trip_runs": {"torch-to-host-has-no-bf16"},
    "torch_to_host_of_a_bf16_tensor_fails": {"torch-compile-traces-numpy-as-torch"},
    # burn's checkpoint record keeps each ParamId where torch's checkpoint entries are new objects
    "torch_save_to_a_file_splits_tensors_over_one_memory_through_two_storages": {"burn-paramid-is-not-object-identity"},
    "torch_compile_host_round_trip_shares_the_version_counter": {
        "burn-tensors-are-values",
        "torch-numpy-round-trip-shares-on-cpu",
        "torch-tensors-over-one-storage-keep-their-own-version-counters",
    },
    "torch_copy_copy_write_is_hidden_from_autograd": {"torch-copy-copy-shares-storage"},
    "torch_step_moves_the_tensor_a_parameter_was_given": {"torch-data-assignment-keeps-the-version-counter"},
}


#: A candidate: torch's training-mode batch norm updates its running statistics without bumping
#: their version counters (pytorch#13402, pytorch#120622, both open), which compiled torch bumps:
#: tests/cases/torch_batch_norm_updates_running_stats_without_bumping_their_version.toml. Every
#: baseline case with a training-mode batch norm forward shows it.
RUNNING_STATS_KEEP_THEIR_VERSION = {
    "variant|torch:cpu~torch:cpu+compile|version|-|forward|kept~bumped",
    "version|torch:cpu+graph~torch:cpu+graph|version|-|forward|changed~kept",
    "version|torch:cpu+foreach~torch:cpu+foreach|version|-|forward|changed~kept",
    "version|torch:cpu~torch:cpu|version|-|forward|changed~kept",
}

#: Findings of a baseline case that no entry explains, each a candidate bug with a case of its own.
UNEXPLAINED = {
    # torch AdamW's foreach and for-loop steps disagree over two Parameters on one storage:
    # tests/cases/torch_foreach_adamw_over_two_parameters_on_one_storage.toml
    "candle_reused_var_is_one_parameter": {
        "variant|torch:cpu~torch:cpu+foreach|value|replace:new|step:adamw|changed~unchanged"
    },
    # the batch norm candidate above, at each case's training-mode forward
    "batch_norm_running_stats_across_clone_save_and_eval": RUNNING_STATS_KEEP_THEIR_VERSION,
    "burn_freeze_puts_batch_norm_in_inference": {
        "variant|torch:cpu~torch:cpu+compile|version|freeze|forward|kept~bumped",
        "version|torch:cpu+graph~torch:cpu+graph|version|-|forward|changed~kept",
        "version|torch:cpu+foreach~torch:cpu+foreach|version|-|forward|changed~kept",
        "version|torch:cpu~torch:cpu|version|-|forward|changed~kept",
    },
    "burn_layer_refuses_an_input_on_another_device": RUNNING_STATS_KEEP_THEIR_VERSION,
    "burn_layer_refuses_an_input_on_the_other_cpu_backend": RUNNING_STATS_KEEP_THEIR_VERSION,
    "burn_module_clone_shares_running_state": RUNNING_STATS_KEEP_THEIR_VERSION,
    "burn_running_stats_move_at_a_mode_change": RUNNING_STATS_KEEP_THEIR_VERSION,
    "burn_valid_train_applies_the_pending_running_update": RUNNING_STATS_KEEP_THEIR_VERSION,
    "burn_valid_train_unshares_a_module_clones_running_state": RUNNING_STATS_KEEP_THEIR_VERSION,
    "candle_batch_norm_output_is_a_transposed_view": RUNNING_STATS_KEEP_THEIR_VERSION,
    # torch:cpu+graph: a `.data` taken in the compiled run that writes through it comes back as a
    # view, which shares its source's version counter (eager's `.data` has one of its own), so
    # the write is seen by autograd: the second backward pass over the retained graph is refused
    # (compare pytorch#139152, open, for `.data` assignment under Dynamo).
    "torch_data_of_a_view_write_between_two_backward_passes": {
        "error|torch:cpu~torch:cpu+graph|status|-|backward_of|ok~error",
        "variant|torch:cpu~torch:cpu+graph|version|view_row|write:whole|kept~bumped",
    },
    "torch_data_write_is_hidden_from_autograd": {
        "variant|torch:cpu~torch:cpu+graph|version|data|write:whole|kept~bumped"
    },
    # torch:cpu+graph: the compiled run's fill of a checkpoint entry over w's memory changes w
    # without bumping its counter, as the per-op compile does for a copy between a parameter and
    # its alias: tests/cases/torch_compile_copy_between_a_parameter_and_its_alias_keeps_the_version.toml
    "torch_file_checkpoint_sharing_seen_by_a_snapshot": {
        "version|torch:cpu+graph~torch:cpu+graph|version|-|fill|changed~kept",
        "variant|torch:cpu~torch:cpu+graph|version|save:file|fill|bumped~kept",
    },
    # torch.compile refuses fill_ of an expanded view that eager torch fills:
    # tests/cases/torch_compile_refuses_a_fill_of_an_expanded_view.toml; and on torch:cpu+graph,
    # the host round trip of the expanded view, traced as torch in the same run
    # as the fill (torch-compile-traces-numpy-into-a-view-with-the-sources-version-counter), is a
    # view sharing the counter (the finding is named by the expand next to the filled name), and
    # the fill through that expanded view writes the sum of its elements (pytorch#197448;
    # tests/cases/torch_compile_refuses_a_fill_of_an_expanded_view.toml shows it alone)
    "torch_host_round_trip_of_an_expanded_view_keeps_its_strides": {
        "error|torch:cpu~torch:cpu+compile|status|-|fill|ok~error",
        "variant|torch:cpu~torch:cpu+graph|version|expand|fill|kept~bumped",
        "variant|torch:cpu~torch:cpu+graph|value|expand|fill|changed~changed",
    },
}


def stem(case: str) -> str:
    return Path(case).stem
