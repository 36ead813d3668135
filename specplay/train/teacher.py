"""The target's answers over the training text, computed once: what distillation learns from.

On a CPU the target's forward passes are the cost of distillation, and rerunning them every step
paid it again each epoch. Here the rollouts are cut into fixed windows, each window runs through
the target once, and what the loss needs is kept: at every position the target's TOP_K most
likely tokens with their log-probabilities and the exact mass of all the others (and, for an exit
head, layer L's hidden states, its input). Every epoch, and a resumed run, reads them back from
`work/teacher-*.npz`.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_flatten

from specplay.train.data import token_stream
from specplay.train.saving import saving

TOP_K = 64
"""Tokens kept per position: past them a distribution's mass is kept as one lump (exact)."""
BATCH = 8


@dataclass(frozen=True)
class Teacher:
    windows: np.ndarray
    """[N, T + 1] token ids: the inputs are [:, :-1]."""
    top_ids: np.ndarray
    """[N, T, K] the target's most likely next tokens at each position."""
    top_logp: np.ndarray
    """[N, T, K] their log-probabilities under the target (temperature 1)."""
    rest_logp: np.ndarray
    """[N, T] the log of the mass the target puts on every other token."""
    hidden: np.ndarray | None = None
    """[N, T, H] layer L's output (float16), the input of an exit head; None for a drafter."""

    def __len__(self) -> int:
        return len(self.windows)

    def batch(self, indices: np.ndarray) -> tuple[mx.array, ...]:
        """(inputs or hidden states, top ids, top log-probs, rest log-prob) for the rows `indices`."""
        first = self.hidden[indices] if self.hidden is not None else self.windows[indices, :-1]
        return (
            mx.array(first),
            mx.array(self.top_ids[indices]),
            mx.array(self.top_logp[indices]),
            mx.array(self.rest_logp[indices]),
        )


def fixed_windows(sequences: Sequence[Sequence[int]], eos_token_id: int, seq_len: int) -> np.ndarray:
    """The sequences joined with EOS between them, cut into windows of seq_len + 1 that overlap by
    one token (so every token is a label once); a shorter tail is dropped."""
    stream = token_stream(sequences, eos_token_id)
    count = (len(stream) - 1) // seq_len
    if count < 1:
        raise ValueError(
            f"the rollouts hold {len(stream)} tokens, too few for one window of {seq_len}; "
            "give more prompts, more --rollout-tokens, or a smaller --seq-len"
        )
    return np.stack([stream[i * seq_len : i * seq_len + seq_len + 1] for i in range(count)])


def answers(logits: mx.array, top_k: int) -> tuple[mx.array, mx.array, mx.array]:
    """(top ids, their log-probs, log of the rest's mass) of each row of logits [..., vocab]."""
    logp = nn.log_softmax(logits.astype(mx.float32), axis=-1)
    ids = mx.argpartition(-logp, kth=top_k - 1, axis=-1)[..., :top_k]
    top = mx.take_along_axis(logp, ids, axis=-1)
    rest = mx.log(mx.maximum(1.0 - mx.exp(top).sum(axis=-1), 1e-12))
    return ids.astype(mx.int32), top, rest


def build_teacher(
    forward: Callable[[mx.array], tuple[mx.array, mx.array | None]],
    windows: np.ndarray,
    top_k: int = TOP_K,
    on_status: Callable[[str], None] = lambda _: None,
) -> Teacher:
    """`forward(inputs)` -> (the target's logits, layer L's hidden states or None), run once per batch."""
    ids, tops, rests, hiddens = [], [], [], []
    for start in range(0, len(windows), BATCH):
        logits, hidden = forward(mx.array(windows[start : start + BATCH, :-1]))
        top_ids, top_logp, rest = answers(logits, top_k)
        mx.eval(top_ids, top_logp, rest, *([hidden] if hidden is not None else []))
        ids.append(np.array(top_ids))
        tops.append(np.array(top_logp))
        rests.append(np.array(rest))
        if hidden is not None:
            hiddens.append(np.array(hidden.astype(mx.float16)))
        on_status(f"the target's answers: {min(start + BATCH, len(windows))}/{len(windows)} windows")
    return Teacher(
        windows,
        np.concatenate(ids),
        np.concatenate(tops),
        np.concatenate(rests),
        np.concatenate(hiddens) if hiddens else None,
    )


def weights_fingerprint(model: nn.Module) -> str:
    """Names, shapes and the first and last values of every weight: tells two targets apart in
    milliseconds, where hashing a 7B model's weights would take minutes."""
    digest = hashlib.sha256()
    for name, array in sorted(tree_flatten(model.parameters())):
        flat = array.reshape(-1)
        ends = mx.concatenate([flat[:1024], flat[-1024:]]).astype(mx.float32)
        digest.update(f"{name}{array.shape}{array.dtype}".encode() + np.array(ends).tobytes())
    return digest.hexdigest()


def load_or_build_teacher(
    work: Path,
    forward: Callable[[mx.array], tuple[mx.array, mx.array | None]],
    windows: np.ndarray,
    key: str,
    top_k: int = TOP_K,
    on_status: Callable[[str], None] = lambda _: None,
) -> Teacher:
    """The teacher for `windows` from `work` if an earlier run (same windows and `key`: what is
    taught and the target's `weights_fingerprint`) left it, else built and saved there atomically."""
    digest = hashlib.sha256(windows.tobytes() + f"{key}/{top_k}".encode()).hexdigest()[:16]
    path = work / f"teacher-{digest}.npz"
    if path.is_file():
        with np.load(path) as saved:
            hidden = saved["hidden"] if "hidden" in saved.files else None
            teacher = Teacher(saved["windows"], saved["top_ids"], saved["top_logp"], saved["rest_logp"], hidden)
        on_status(f"reusing the target's answers over {len(teacher.windows)} windows from {path}")
        return teacher
    teacher = build_teacher(forward, windows, top_k, on_status)
    work.mkdir(parents=True, exist_ok=True)
    partial = work / f".{path.name}.{os.getpid()}.tmp.npz"
    arrays = {
        "windows": teacher.windows,
        "top_ids": teacher.top_ids,
        "top_logp": teacher.top_logp,
        "rest_logp": teacher.rest_logp,
    }
    with saving("the target's answers", work, [partial]):
        np.savez(partial, **arrays, **({"hidden": teacher.hidden} if teacher.hidden is not None else {}))
        os.replace(partial, path)  # a killed run leaves no half file that a later one would trust
    return teacher


def step_indices(seed: int, step: int, count: int, batch_size: int) -> np.ndarray:
    """The windows of one step: a function of (seed, step) only, so a resumed run reads the same."""
    return np.random.default_rng([seed, step]).integers(0, count, size=batch_size)
