"""Token streams and the random windows training reads from them."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def token_stream(token_lists: Sequence[Sequence[int]], eos_token_id: int) -> np.ndarray:
    """Documents joined end to end, each followed by EOS, as a model sees them at generation time."""
    pieces = [np.asarray([*ids, eos_token_id], dtype=np.int32) for ids in token_lists if len(ids)]
    return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int32)


class Windows:
    """Random windows of `seq_len + 1` tokens from one or more streams mixed by weight.

    The batch for step s depends only on (seed, s), so a resumed run reads the same batches an
    uninterrupted one would have.
    """

    def __init__(self, streams: Sequence[np.ndarray], weights: Sequence[float], seq_len: int, seed: int) -> None:
        usable = [(s, w) for s, w in zip(streams, weights, strict=True) if w > 0]
        short = [len(s) for s, _ in usable if len(s) <= seq_len + 1]
        if short:
            raise ValueError(f"a token stream has only {short[0]} tokens; it needs more than {seq_len + 1}")
        self.streams = [s for s, _ in usable]
        total = sum(w for _, w in usable)
        self.weights = np.array([w / total for _, w in usable])
        self.seq_len = seq_len
        self.seed = seed

    def batch(self, step: int, batch_size: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, step])
        which = rng.choice(len(self.streams), size=batch_size, p=self.weights)
        rows = []
        for index in which:
            stream = self.streams[index]
            start = int(rng.integers(0, len(stream) - self.seq_len - 1))
            rows.append(stream[start : start + self.seq_len + 1])
        return np.stack(rows)
