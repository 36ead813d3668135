"""`specplay distill` and the training code behind it, on the tiny models built by the tests."""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from specplay.cli import main
from specplay.errors import SpecplayError
from specplay.train.distill import DistillConfig, distill, load_or_make_rollouts, mean_kl
from specplay.train.models import load_folder
from specplay.train.prompts import TrainingPrompt, read_prompts
from specplay.train.rollouts import RolloutConfig, rollouts
from specplay.train.teacher import weights_fingerprint
from specplay.train.trainer import Progress, TrainConfig
from tests.support.checks import every
from tests.support.tiny_models import TinyModels

PROMPTS = [
    "def parse(line):\n    fields = line.split(",
    "The module provides a way to read configuration files.",
    "class Stack:\n    def __init__(self):\n",
    "import os\nimport sys\n\n",
    "Return the number of items in the sequence.",
    "for key, value in sorted(mapping.items()):\n",
]


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def encode(tiny: TinyModels, texts: list[str]) -> list[list[int]]:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tiny.target / "tokenizer.json"))
    return [tokenizer.encode(t).ids for t in texts]


def eos(tiny: TinyModels) -> int:
    return json.loads((tiny.target / "config.json").read_text())["eos_token_id"]


def small_config(steps: int, **extra: object) -> DistillConfig:
    """A few quick steps, written whatever they did to the held-out KL (the tests that use it are
    about the mechanics; one test holds what training achieves, another the refusal)."""
    train = TrainConfig(steps=steps, batch_size=4, seq_len=24, learning_rate=3e-3, warmup_steps=2, checkpoint_every=2)
    return DistillConfig(train=train, rollouts=RolloutConfig(tokens=24), **({"keep_worse": True} | extra))


def test_batched_rollouts_match_one_at_a_time_greedy(tiny: TinyModels) -> None:
    """Left padding must not leak into any row: a batch of prompts of different lengths gives each
    prompt the continuation it gets alone."""
    target, _ = load_folder(tiny.target)
    prompts = encode(tiny, PROMPTS)
    assert len({len(p) for p in prompts}) > 1
    batched = rollouts(target, prompts, 12, 0.0, eos(tiny), seed=0, batch_size=4)
    alone = rollouts(target, prompts, 12, 0.0, eos(tiny), seed=0, batch_size=1)
    assert batched == alone
    assert every(row[: len(p)] == p for row, p in zip(batched, prompts, strict=True))


def test_a_few_distillation_steps_lower_the_held_out_kl(tiny: TinyModels, tmp_path: Path) -> None:
    target, _ = load_folder(tiny.target)
    draft, config = load_folder(tiny.far)
    result = distill(
        target, draft, config, tiny.far, encode(tiny, PROMPTS * 4), eos(tiny), tmp_path / "d", small_config(30)
    )
    assert result.held_out_kl_after < 0.8 * result.held_out_kl_before
    reloaded, _ = load_folder(tmp_path / "d")  # an mlx-lm folder with the drafter's tokenizer
    assert (tmp_path / "d" / "tokenizer.json").read_bytes() == (tiny.far / "tokenizer.json").read_bytes()
    held = np.stack([np.array(encode(tiny, PROMPTS)[0][:9])])
    assert mean_kl(reloaded, target, held) == pytest.approx(mean_kl(draft, target, held), rel=1e-4)


def test_a_drafter_training_made_worse_is_not_written_unless_asked(tiny: TinyModels, tmp_path: Path) -> None:
    """A near copy of the target trained at far too high a rate ends further from it: the drafter
    started from stays the better one, and nothing replaces it unless --keep-worse says so."""
    target, _ = load_folder(tiny.target)
    prompts = encode(tiny, PROMPTS * 4)
    harsh = TrainConfig(steps=6, batch_size=4, seq_len=24, learning_rate=1.0, warmup_steps=0, checkpoint_every=2)
    draft, config = load_folder(tiny.near)
    with pytest.raises(SpecplayError, match=r"training made the drafter worse .* nothing was written") as caught:
        distill(target, draft, config, tiny.near, prompts, eos(tiny), tmp_path / "d", DistillConfig(train=harsh))
    assert "--keep-worse" in str(caught.value) and not (tmp_path / "d" / "model.safetensors").exists()
    draft, config = load_folder(tiny.near)
    kept = DistillConfig(train=harsh, keep_worse=True)
    result = distill(target, draft, config, tiny.near, prompts, eos(tiny), tmp_path / "w", kept)
    assert result.worse and (tmp_path / "w" / "model.safetensors").exists()


def test_last_layers_leaves_the_other_layers_untouched(tiny: TinyModels, tmp_path: Path) -> None:
    target, _ = load_folder(tiny.target)
    draft, config = load_folder(tiny.near)
    before = {k: np.array(v) for k, v in mx.load(str(tiny.near / "model.safetensors")).items()}
    distill(
        target,
        draft,
        config,
        tiny.near,
        encode(tiny, PROMPTS * 2),
        eos(tiny),
        tmp_path / "d",
        small_config(4, last_layers=1),
    )
    after = mx.load(str(tmp_path / "d" / "model.safetensors"))
    changed = {k for k, v in after.items() if not np.allclose(np.array(v), before[k])}
    assert changed and every(not k.startswith("model.layers.0.") and "embed_tokens" not in k for k in changed)
    assert any(k.startswith("model.layers.1.") for k in changed)


def test_an_interrupted_run_resumes_to_the_same_drafter(tiny: TinyModels, tmp_path: Path) -> None:
    target, _ = load_folder(tiny.target)
    prompts = encode(tiny, PROMPTS * 2)

    def run(out: Path, stop_at: int | None = None) -> list[Progress]:
        draft, config = load_folder(tiny.far)
        reports: list[Progress] = []

        def on_progress(progress: Progress) -> None:
            reports.append(progress)
            if progress.step == stop_at:
                raise KeyboardInterrupt

        distill(target, draft, config, tiny.far, prompts, eos(tiny), out, small_config(6), on_progress=on_progress)
        return reports

    run(tmp_path / "whole")
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "resumed", stop_at=3)
    assert not (tmp_path / "resumed" / "config.json").exists()
    reports = run(tmp_path / "resumed")
    # the resumed run first says where it stands (the interrupted step is run again), then goes on
    assert (reports[0].step, reports[0].loss) == (2, None) and [p.step for p in reports[1:]] == [3, 4, 5, 6]
    whole = mx.load(str(tmp_path / "whole" / "model.safetensors"))
    resumed = mx.load(str(tmp_path / "resumed" / "model.safetensors"))
    for name, value in whole.items():
        np.testing.assert_allclose(np.array(resumed[name]), np.array(value), rtol=1e-5, atol=1e-6)


def test_rollouts_are_reused_only_for_the_same_target_prompts_and_settings(tiny: TinyModels, tmp_path: Path) -> None:
    target, _ = load_folder(tiny.target)
    other, _ = load_folder(tiny.near)
    prompts = encode(tiny, PROMPTS)
    said: list[str] = []

    def make(model: object, prompts: list[list[int]], config: RolloutConfig) -> list[list[int]]:
        return load_or_make_rollouts(tmp_path, model, prompts, config, 0, eos(tiny), said.append)  # type: ignore[arg-type]

    first = make(target, prompts, RolloutConfig(tokens=24))
    assert make(target, prompts, RolloutConfig(tokens=24)) == first and said[-1].startswith("reusing 6 rollouts")
    for changed in (
        (other, prompts, RolloutConfig(tokens=24)),  # another target in the same --out
        (target, prompts[:3], RolloutConfig(tokens=24)),
        (target, prompts, RolloutConfig(tokens=24, temperature=0.5)),
    ):
        said.clear()
        make(*changed)
        assert not any(s.startswith("reusing") for s in said), changed[1:]
    assert len(list(tmp_path.glob("rollouts-*.npz"))) == 4 and not list(tmp_path.glob(".*"))
    # The target's answers are keyed by the same fingerprint: another target's are never reused.
    assert weights_fingerprint(target) == weights_fingerprint(load_folder(tiny.target)[0])
    assert weights_fingerprint(target) != weights_fingerprint(other)


def test_prompts_come_from_text_jsonl_or_saved_sessions(tmp_path: Path) -> None:
    text = tmp_path / "p.txt"
    text.write_text("first prompt\nstill first\n\nsecond prompt\n")
    assert [p.text for p in read_prompts(text)] == ["first prompt\nstill first", "second prompt"]
    lines = tmp_path / "p.jsonl"
    lines.write_text('{"prompt": "a"}\n{"text": "b"}\n')
    assert read_prompts(lines) == [TrainingPrompt("a"), TrainingPrompt("b")]
    from specplay.errors import SpecplayError

    lines.write_text('{"prompt": "a"}\n{"other": 1}\n')
    with pytest.raises(SpecplayError, match=r"p.jsonl:2: no \"prompt\" or \"text\""):
        read_prompts(lines)


def test_cli_distills_from_saved_sessions_and_the_result_drafts(
    tiny: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sessions = tmp_path / "sessions"
    for prompt in PROMPTS[:3]:
        code, _, err = run_cli(
            capsys,
            "run",
            "--target",
            str(tiny.target),
            "--draft",
            str(tiny.near),
            "--prompt",
            prompt,
            "--raw",
            "--max-tokens",
            "8",
            "--save",
            "--sessions-dir",
            str(sessions),
        )
        assert code == 0, err
    out = tmp_path / "drafter"
    code, stdout, err = run_cli(
        capsys,
        "distill",
        "--target",
        str(tiny.target),
        "--draft",
        str(tiny.far),
        "--data",
        str(sessions),
        "--out",
        str(out),
        "--steps",
        "3",
        "--batch-size",
        "2",
        "--seq-len",
        "16",
        "--rollout-tokens",
        "16",
        "--keep-worse",
    )
    assert code == 0, err
    assert "held-out KL" in stdout and (out / "distill.json").is_file()
    code, stdout, err = run_cli(
        capsys,
        "run",
        "--target",
        str(tiny.target),
        "--draft",
        f"mine={out}",
        "--prompt",
        PROMPTS[0],
        "--raw",
        "--max-tokens",
        "8",
        "--json",
    )
    assert code == 0, err
    assert json.loads(stdout.splitlines()[-1])["metrics"]["num_draft_tokens"] > 0


def test_cli_refuses_mismatched_tokenizers_and_missing_data(
    tiny: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "p.txt"
    data.write_text("a prompt\n")
    code, _, err = run_cli(
        capsys,
        "distill",
        "--target",
        str(tiny.target),
        "--draft",
        str(tiny.other_vocab),
        "--data",
        str(data),
        "--out",
        str(tmp_path / "o"),
    )
    assert code == 2 and len(err.strip().splitlines()) == 1 and "token mapping" in err
    code, _, err = run_cli(
        capsys,
        "distill",
        "--target",
        str(tiny.target),
        "--draft",
        str(tiny.near),
        "--data",
        str(tmp_path / "nope.txt"),
        "--out",
        str(tmp_path / "o"),
    )
    assert code == 2 and len(err.strip().splitlines()) == 1 and "nope.txt" in err and "not found" in err
    latin1 = tmp_path / "latin1.jsonl"
    latin1.write_bytes(b'{"prompt": "caf\xe9"}\n')
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for prompts, out, message in (
        (latin1, tmp_path / "o", "is not UTF-8 text"),
        (data, blocker / "o", f"cannot write to --out {blocker / 'o'}"),  # said before any rollout
    ):
        common = ["distill", "--target", str(tiny.target), "--exit-head", "layers=1"]
        code, _, err = run_cli(capsys, *common, "--data", str(prompts), "--out", str(out))
        assert code == 2 and len(err.strip().splitlines()) == 1 and message in err, err


def test_the_sparse_kl_is_exact_over_its_groups_and_bounds_the_full_kl() -> None:
    import mlx.core as mx
    import numpy as np

    from specplay.train.losses import forward_kl, sparse_forward_kl
    from specplay.train.teacher import answers

    rng = np.random.default_rng(0)
    target_logits = mx.array(rng.normal(size=(2, 3, 50)).astype(np.float32) * 3)
    draft_logits = mx.array(rng.normal(size=(2, 3, 50)).astype(np.float32) * 3)
    mask = mx.ones((2, 3))
    full = forward_kl(mx.log(mx.softmax(target_logits, axis=-1)), draft_logits, mask).item()
    everything = sparse_forward_kl(draft_logits, *answers(target_logits, 50), mask).item()
    assert everything == pytest.approx(full, rel=1e-4)  # K = vocab: the rest is empty, the KL exact
    assert sparse_forward_kl(draft_logits, *answers(target_logits, 8), mask).item() <= full + 1e-6


def test_the_targets_answers_are_computed_once_and_reused(tmp_path: Path) -> None:
    import mlx.core as mx
    import numpy as np

    from specplay.train.teacher import load_or_build_teacher

    windows = np.arange(3 * 9, dtype=np.int32).reshape(3, 9) % 20
    calls = []

    def forward(inputs: mx.array) -> tuple[mx.array, None]:
        calls.append(inputs.shape)
        return mx.eye(20)[inputs] * 5.0, None

    first = load_or_build_teacher(tmp_path, forward, windows, "drafter", top_k=4)
    again = load_or_build_teacher(tmp_path, forward, windows, "drafter", top_k=4)
    assert len(calls) == 1 and np.array_equal(first.top_ids, again.top_ids)
    assert first.top_ids.shape == (3, 8, 4) and not list(tmp_path.glob(".*tmp*"))
    load_or_build_teacher(tmp_path, forward, windows, "exit-3", top_k=4)  # another question: answered anew
    assert len(calls) == 2


def test_distill_from_scratch_and_an_exit_head_through_the_cli(
    tiny: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    import mlx.core as mx

    from specplay.backends.mlx.loading import load_model
    from specplay.train.models import load_folder

    data = tmp_path / "prompts.txt"
    data.write_text("\n\n".join(["def parse(path):", "The module provides", "class Reader:", "It returns"] * 3))
    common = ["--target", str(tiny.target), "--data", str(data), "--steps", "6", "--batch-size", "2"]
    common += ["--seq-len", "16", "--rollout-tokens", "24", "--keep-worse"]
    new = tmp_path / "new"
    assert main(["distill", *common, "--new-drafter", "layers=1,width=64", "--out", str(new)]) == 0
    model, config = load_folder(new)
    target = load_model("target", str(tiny.target))
    assert config["num_hidden_layers"] == 1 and config["vocab_size"] == 512
    # started from the target's own embedding (the widths match), then trained a little
    start = target.model.model.embed_tokens.weight
    assert mx.abs(model.model.embed_tokens.weight - start).mean().item() < mx.abs(start).mean().item()
    head = tmp_path / "head"
    assert main(["distill", *common, "--exit-head", "layers=1", "--out", str(head)]) == 0
    assert f"--draft exit=early-exit:layers=1,head={head}" in capsys.readouterr().out
    args = ["run", "--target", str(tiny.target), "--draft", f"exit=early-exit:layers=1,head={head}"]
    assert main([*args, "--draft", f"new={new}", "--prompt", "def f(", "--raw", "--max-tokens", "6", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["token_ids"]) == 6


@pytest.mark.parametrize(
    "flag, value, message",
    [
        ("--new-drafter", "layers=2", "--new-drafter needs layers=N and width=W"),
        ("--new-drafter", "layers=0,width=64", "--new-drafter takes layers=N, width=N, heads=N, whole numbers"),
        ("--exit-head", "depth=3", "--exit-head takes layers=N, mlp=N"),
    ],
)
def test_bad_shapes_are_one_line(
    flag: str, value: str, message: str, tiny: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "prompts.txt"
    data.write_text("x")
    args = ["distill", "--target", str(tiny.target), "--data", str(data), "--out", str(tmp_path / "o")]
    assert main([*args, flag, value]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
