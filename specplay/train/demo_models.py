"""Build the demo models that ship inside specplay, offline, from this Python installation.

    python scripts/build_demo_models.py OUT_DIR [--stage all|tokenizer|target|base|prose|manifest]

Stages (each skipped when its output exists, so an interrupted build continues):
1. tokenizer: byte-level BPE on the training split of the corpus (code and prose).
2. target: a small llama trained from scratch on code and prose (cross-entropy), stored int8.
3. base: a 2-layer drafter distilled (forward KL) from the target on text that is mostly code.
4. prose: `base` further distilled on the target's own continuations of prose prompts, through
   the same code path as `specplay distill`.
5. manifest: corpus, hyper-parameters, parameter counts and the sha256 of every file.
"""

from __future__ import annotations

import hashlib
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

from specplay.files.json_text import dump_json
from specplay.train import corpus
from specplay.train.data import Windows, token_stream
from specplay.train.distill import DistillConfig, distill
from specplay.train.losses import forward_kl_loss, next_token_loss, target_log_probs
from specplay.train.model_files import llama_config, train_tokenizer
from specplay.train.models import load_folder, new_model, parameter_count, save_folder
from specplay.train.rollouts import RolloutConfig
from specplay.train.trainer import Progress, TrainConfig, train

VOCAB_SIZE = 4096
TARGET_CONFIG = llama_config(384, 6, VOCAB_SIZE, intermediate_size=1536, num_heads=6)
DRAFT_CONFIG = llama_config(128, 2, VOCAB_SIZE, intermediate_size=512, num_heads=2)
TARGET_TRAIN = TrainConfig(steps=640, batch_size=8, seq_len=128, learning_rate=1e-3, warmup_steps=50, seed=0)
TARGET_CODE_SHARE = 0.7
"""The target sees prose often enough to model it well; the corpus itself is 88% code."""
TARGET_STORAGE = "int8"
DRAFT_STORAGE = "float16"
BASE_TRAIN = TrainConfig(steps=320, batch_size=16, seq_len=128, learning_rate=3e-3, warmup_steps=30, seed=2)
BASE_CODE_SHARE = 0.95
"""`base` is the code drafter: it sees a little prose, as a code-tuned drafter would."""
PROSE_DISTILL = DistillConfig(
    train=TrainConfig(steps=240, batch_size=16, seq_len=128, learning_rate=1e-3, warmup_steps=20, seed=3),
    rollouts=RolloutConfig(tokens=96, temperature=1.0),
    storage=DRAFT_STORAGE,
)
PROSE_PROMPTS = 1024
PROSE_PROMPT_TOKENS = (16, 64)
"""Prose prompts are windows of these many tokens from the training prose, like a user's paste."""


def print_progress(label: str) -> Callable[[Progress], None]:
    def report(progress: Progress) -> None:
        if progress.loss is None or progress.tokens_per_s is None or progress.eta_s is None:
            print(f"{label}: resumed at step {progress.step}/{progress.steps}", flush=True)
        elif progress.step % 10 == 0 or progress.step == progress.steps:
            print(
                f"{label}: step {progress.step}/{progress.steps}  loss {progress.loss:.3f}  "
                f"{progress.tokens_per_s:.0f} tokens/s  ETA {progress.eta_s / 60:.1f} min",
                flush=True,
            )

    return report


def encode(tokenizer: Any, texts: list[corpus.Text]) -> list[list[int]]:
    return [tokenizer.encode(t.body).ids for t in texts]


def load_tokenizer(out: Path) -> Any:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(out / "tokenizer" / "tokenizer.json"))


def corpus_streams(out: Path) -> dict[str, Any]:
    """Train-split token streams per kind, cached next to the models."""
    cache = out / "work" / "streams.npz"
    if cache.is_file():
        return dict(np.load(cache))
    tokenizer = load_tokenizer(out)
    eos = tokenizer.token_to_id("<|endoftext|>")
    streams = {}
    for kind, texts in (("code", corpus.code_texts()), ("prose", corpus.prose_texts())):
        train_texts, _ = corpus.split(texts)
        streams[kind] = token_stream(encode(tokenizer, train_texts), eos)
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.savez(cache, **streams)
    return streams


def build_tokenizer(out: Path) -> None:
    texts = [t.body for t in corpus.split(corpus.code_texts() + corpus.prose_texts())[0]]
    train_tokenizer(texts, out / "tokenizer", vocab_size=VOCAB_SIZE)


def build_target(out: Path) -> None:
    streams = corpus_streams(out)
    windows = Windows(
        [streams["code"], streams["prose"]], [TARGET_CODE_SHARE, 1 - TARGET_CODE_SHARE], TARGET_TRAIN.seq_len, seed=1
    )
    model = new_model(TARGET_CONFIG, seed=0)
    print(f"target: {parameter_count(model) / 1e6:.1f}M parameters", flush=True)
    train(
        model,
        next_token_loss,
        lambda step: (mx.array(windows.batch(step, TARGET_TRAIN.batch_size)),),
        TARGET_TRAIN,
        on_progress=print_progress("target"),
        checkpoint_dir=out / "work" / "target-checkpoint",
    )
    save_folder(out / "target", model, TARGET_CONFIG, out / "tokenizer", storage=TARGET_STORAGE)


def build_base(out: Path) -> None:
    """Forward KL against the target on text that is mostly code (teacher forcing on the corpus)."""
    streams = corpus_streams(out)
    windows = Windows(
        [streams["code"], streams["prose"]], [BASE_CODE_SHARE, 1 - BASE_CODE_SHARE], BASE_TRAIN.seq_len, seed=4
    )
    target, _ = load_folder(out / "target")
    draft = new_model(DRAFT_CONFIG, seed=1)
    print(f"base: {parameter_count(draft) / 1e6:.2f}M parameters", flush=True)

    def batch(step: int) -> tuple[mx.array, ...]:
        inputs = mx.array(windows.batch(step, BASE_TRAIN.batch_size)[:, :-1])
        return inputs, target_log_probs(target, inputs), mx.ones(inputs.shape)

    train(
        draft,
        forward_kl_loss,
        batch,
        BASE_TRAIN,
        on_progress=print_progress("base"),
        checkpoint_dir=out / "work" / "base-checkpoint",
    )
    save_folder(out / "base", draft, DRAFT_CONFIG, out / "tokenizer", storage=DRAFT_STORAGE)


def prose_prompts(out: Path) -> list[list[int]]:
    tokenizer = load_tokenizer(out)
    texts = corpus.split(corpus.prose_texts())[0]
    rng = np.random.default_rng(5)
    prompts = []
    for index in rng.choice(len(texts), size=PROSE_PROMPTS):
        ids = tokenizer.encode(texts[index].body).ids
        length = int(rng.integers(*PROSE_PROMPT_TOKENS))
        start = int(rng.integers(0, max(len(ids) - length, 0) + 1))
        prompts.append(ids[start : start + length])
    return [p for p in prompts if p]


def build_prose(out: Path) -> None:
    """`base` distilled on the target's own continuations of prose: `specplay distill`'s code path."""
    target, _ = load_folder(out / "target")
    draft, config = load_folder(out / "base")
    eos = load_tokenizer(out).token_to_id("<|endoftext|>")
    distill(
        target,
        draft,
        draft_config=config,
        tokenizer_dir=out / "tokenizer",
        prompts=prose_prompts(out),
        eos_token_id=eos,
        out=out / "prose",
        config=PROSE_DISTILL,
        on_progress=print_progress("prose"),
        on_status=lambda line: print(f"prose: {line}", flush=True),
    )
    (out / "prose" / "distill.json").unlink()  # the manifest records the demo's provenance
    shutil.rmtree(out / "prose" / "work")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_manifest(out: Path) -> None:
    """What the models were made from and how, and a checksum of every shipped file."""
    manifest = {
        "corpus": {
            "code": corpus.describe(corpus.split(corpus.code_texts())[0]),
            "prose": corpus.describe(corpus.split(corpus.prose_texts())[0]),
            "held_out_share": corpus.HELD_OUT_SHARE,
        },
        "tokenizer": {"type": "byte-level BPE", "vocab_size": VOCAB_SIZE},
        "models": {
            "target": {
                "config": TARGET_CONFIG,
                "train": asdict(TARGET_TRAIN),
                "code_share": TARGET_CODE_SHARE,
                "storage": TARGET_STORAGE,
                "objective": "cross-entropy",
            },
            "base": {
                "config": DRAFT_CONFIG,
                "train": asdict(BASE_TRAIN),
                "code_share": BASE_CODE_SHARE,
                "storage": DRAFT_STORAGE,
                "objective": "forward KL to target, teacher-forced on the corpus",
            },
            "prose": {
                "init": "base",
                "distill": asdict(PROSE_DISTILL),
                "prompts": PROSE_PROMPTS,
                "prompt_tokens": PROSE_PROMPT_TOKENS,
                "storage": DRAFT_STORAGE,
                "objective": "forward KL to target on the target's rollouts of prose prompts",
            },
        },
        "files": {
            f"{name}/{file.name}": sha256(file)
            for name in MODEL_NAMES
            for file in sorted((out / name).iterdir())
            if file.is_file()
        },
    }
    (out / "manifest.json").write_text(dump_json(manifest, indent=2) + "\n")


MODEL_NAMES = ("target", "base", "prose")
STAGES = {
    "tokenizer": build_tokenizer,
    "target": build_target,
    "base": build_base,
    "prose": build_prose,
    "manifest": build_manifest,
}
OUTPUTS = {
    "tokenizer": "tokenizer/tokenizer.json",
    "target": "target/config.json",
    "base": "base/config.json",
    "prose": "prose/config.json",
    "manifest": "manifest.json",
}


def build(out: Path, stage: str = "all") -> None:
    """Run `stage` (or all stages, in order) into `out`, skipping what is already built."""
    for name, make in STAGES.items():
        if stage not in ("all", name):
            continue
        if (out / OUTPUTS[name]).is_file():
            print(f"{name}: already built", flush=True)
            continue
        started = time.perf_counter()
        make(out)
        print(f"{name}: built in {(time.perf_counter() - started) / 60:.1f} min", flush=True)
