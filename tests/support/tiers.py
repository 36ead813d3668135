"""The test tiers: what is slow, and why (tests/conftest.py marks it). `python -m pytest -m "not slow"`
is the quick tier a contributor runs while working; `python -m pytest` runs every tier."""

SLOW_FIXTURES = {
    "smollm2": "the real SmolLM2 GGUF, fetched once and converted",
    "real_vllm": "real vLLM servers (vLLM's CPU build)",
}
SLOW = {
    "tests/review/test_review_browser.py": "a real Chromium",
    "tests/backends/mlx/test_statistical.py": "thousands of samples per distribution",
    "tests/backends/mlx/test_suffix_statistical.py": "thousands of samples per distribution, chain and tree",
    "tests/backends/vllm/test_vllm_real.py": "real vLLM servers",
    "tests/backends/vllm/test_vllm_cli.py": "every command end to end against server processes",
    "tests/backends/vllm/test_vllm_exact.py": "exact corrections, request by request, against fake servers",
    "tests/backends/vllm/test_vllm_native.py": "the playground watching fake speculating servers",
    "tests/backends/vllm/test_vllm_backend.py": "fake vLLM servers over HTTP, each running a tiny MLX model",
    "tests/backends/vllm/test_vllm_costs.py": "fake vLLM servers over HTTP, timed row count by row count",
    "tests/ui/test_ui_controller.py::test_a_full_disk_mid_run_stops_saving_not_the_run[vllm]": "fake vLLM servers",
    "tests/store/test_session_faults.py::test_fuzzed": "hundreds of fuzzed sessions",
    "tests/ui/test_ui_app.py::test_a_saved_session_opens": "two playgrounds, one after the other (the "
    "controller's tests open sessions quickly)",
    "tests/ui/test_bench_tui.py": "the playground timed against a replay of its session",
    "tests/backends/mlx/test_blas_threads.py": "a process per OpenBLAS setting",
    "tests/backends/mlx/test_kernels.py": "MLX's compiler building each kernel at run time",
    "tests/backends/mlx/test_reference_round.py": "the tiny MLX models against the reference, many seeds "
    "(tests/engine/test_reference_round.py holds the engine to it on the scripted backend)",
    "tests/backends/mlx/test_drafters.py": "every drafter kind on the tiny MLX models, many runs each",
    "tests/backends/mlx/test_engine_mlx.py::test_greedy_speculative_equals_greedy_target_only": "every policy "
    "and route on the tiny MLX models (the engine's own logic: tests/engine/test_engine.py)",
    "tests/backends/mlx/test_gguf.py::test_a_signal": "a conversion process, signalled",
    "tests/backends/mlx/test_gguf.py::test_a_killed": "a conversion process, killed",
    "tests/backends/mlx/test_hostile_models.py::test_declared_sizes": "a specplay process per hostile model, "
    "under a memory limit",
    "tests/backends/mlx/test_hostile_models.py::test_a_full_disk": "a specplay process under a file-size limit",
    "tests/backends/mlx/test_hostile_models.py::test_fuzzed": "dozens of fuzzed GGUF headers and model "
    "configs, each converted or loaded",
    "tests/review/test_fidelity.py": "many samples of each lane, scored by the target",
    "tests/cli/test_bench.py": "benchmark runs writing every report",
    "tests/cli/test_suffix_commands.py": "costs timed row count by row count, and a quick bench, with a suffix drafter",
    "tests/cli/test_costs.py::test_costs_json": "the demo models timed row count by row count, and run per drafter",
    "tests/cli/test_costs.py::test_acceptance_read": "the demo models timed row count by row count",
    "tests/cli/test_run_conversation.py::test_costs_reads_every_turns_rounds": "a conversation on the demo "
    "models, then the demo models timed row count by row count",
    "tests/cli/test_numeric_flags.py": "every command with every numeric flag",
    "tests/cli/test_router_cli.py::test_train_then_eval": "the demo models run on four prompts with counterfactual "
    "routes, then a router trained and evaluated on those sessions",
    "tests/cli/test_fetch.py": "a local package index served over HTTP",
    "tests/cli/test_cli.py::test_a_real_process": "a specplay process",
    "tests/cli/test_hostile_inputs.py::test_a_narrow_output_encoding": "specplay processes on the demo models",
    "tests/cli/test_bench_out.py::test_a_report_specplay_wrote_is_replaced": "a benchmark run writing every report",
    "tests/backends/vllm/test_vllm_hostile_servers.py::test_a_native_stream": "a specplay process against a fake "
    "speculating server that streams until --timeout",
    "tests/cli/test_cli.py::test_a_model_in_the_hugging_face_cache": "a specplay process",
    "tests/store/test_sessions.py::test_a_killed_run": "a specplay process, killed",
    "tests/store/test_sessions.py::test_ctrl_c": "a specplay process, interrupted",
    "tests/train/test_distill.py": "training drafters",
    "tests/ui/test_ui_app.py::test_the_": "a live change while a run goes (the controller's tests change each live)",
    "tests/ui/test_ui_app.py::test_another_rule": "a live change while a run goes",
    "tests/ui/test_ui_app.py::test_counterfactual": "a live change while a run goes",
    "tests/ui/test_ui_app.py::test_adaptive": "a live change while a run goes",
    "tests/cli/test_pipes.py": "specplay processes writing into pipes whose readers leave",
    "tests/backends/vllm/test_vllm_token_ids.py::test_a_bad_id_stops_a_run": "a specplay process per bad id "
    "(the ids' checks themselves run in the quick tier)",
    "tests/backends/vllm/test_vllm_drafter_stops.py": "fake vLLM servers over HTTP, each running a tiny MLX model",
    "tests/backends/vllm/test_vllm_replies.py::test_mutated_replies": "hundreds of mutated replies",
    "tests/cli/test_bench_workload.py::test_a_bench_stopped_part_way": "a benchmark process, signalled",
    "tests/backends/mlx/test_trees.py::test_greedy_trees_equal": "every width and node budget on the tiny MLX "
    "models (the engine's own tree logic: tests/engine/test_tree.py)",
    "tests/backends/mlx/test_trees.py::test_a_sampled_chain": "sampled trees on the tiny MLX models, seed by seed",
    "tests/train/test_checkpoint_faults.py::test_distill_on_a_full_disk": "training under a file-size limit, "
    "per limit and per kind",
    "tests/store/test_saved_sessions.py::test_run_replay_reproduces_the_sampled_session": "old sessions "
    "replayed on the MLX models they recorded, sampled",
    "tests/cli/test_bench_spec_bench.py::test_bench_reports": "a benchmark run writing every report (the file's "
    "reading, picking and conversations are tested quick beside it)",
    "tests/ui/test_ui_conversation.py::test_a_follow_up_on_vllm": "fake vLLM servers over HTTP, each running a tiny "
    "MLX model",
    "tests/cli/test_costs_advice.py::test_acceptance_is_measured": "the demo models timed row count by row count",
    "tests/ui/test_ui_app.py::test_a_tree_under_typical": "a live change while a run goes, in both orders (the "
    "controller's tests refuse each value quick)",
    "tests/cli/test_costs.py::test_max_rows_below": "the demo models timed row count by row count",
    "tests/cli/test_costs.py::test_a_tree_session_reads": "a tree run, then the demo models timed row count by row "
    "count",
    "tests/cli/test_costs.py::test_prompt_lookup_alone": "the demo models timed row count by row count",
    "tests/ui/test_ui_conversation.py::test_a_follow_up_continues": "a live change while a run goes, over two turns",
    "tests/cli/test_bench_out.py::test_the_measurements_are_written": "a benchmark run writing every report",
    "tests/backends/vllm/test_vllm_lying_target.py::test_an_honest_target": "fake vLLM servers over HTTP, each running "
    "a tiny MLX model, in every verify strategy",
    "tests/cli/test_hostile_inputs.py::test_distill_takes": "training a drafter",
    "tests/router_training/test_train.py::test_too_few_or_one_sided": "routers trained and cross-validated on twenty "
    "sessions",
    "tests/config/test_add_a_control.py::test_the_panel_shows_it": "a live change while a run goes (its flag and "
    "its live re-application are tested quick beside it)",
    "tests/ui/test_ui_conversation.py::test_a_follow_up_on_real_mlx": "two turns of the tiny MLX models in the "
    "playground (the scripted conversation runs quick)",
    "tests/cli/test_run_conversation.py::test_a_replay_runs": "a conversation run twice on the demo models",
    "tests/cli/test_run_conversation.py::test_every_greedy_turn_equals_target_only_and_is_saved_and_reported[demo]": (
        "a conversation on the demo models (on the tiny chat-template models it runs quick)"
    ),
    "tests/backends/mlx/test_suffix_drafter.py::test_the_demo_models_remember": "the demo models run three times, "
    "each a command of its own (the tiny models remember quick)",
}
"""The slow tier, by test id prefix, each with why it is not in the quick tier."""
