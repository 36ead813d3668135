"""Logits to the distribution that is sampled and verified, for target and drafter alike.

Order, as in Hugging Face transformers: temperature, then top-k, top-p and min-p, each filter
renormalising what it keeps. Ties at a filter's boundary are all kept, so the result does not
depend on how a sort breaks ties. `xp` is numpy or mlx.core; everything runs in float32.
"""

from __future__ import annotations

from typing import Any

from specplay.engine.accept import Array
from specplay.engine.settings import SamplingParams

MAX_INVERSE_TEMPERATURE = 1e30
"""Temperatures below 1e-30 act as 1e-30: the distribution is then one-hot (or even over ties)."""


def softmax(logits: Array, xp: Any, inverse_temperature: float = 1.0) -> Array:
    """Scaled after the shift, so a tiny temperature gives 0 and -inf exponents, never inf - inf."""
    shifted = xp.exp((logits - logits.max(axis=-1, keepdims=True)) * inverse_temperature)
    return shifted / shifted.sum(axis=-1, keepdims=True)


def one_hot(tokens: Array, vocab_size: int, xp: Any) -> Array:
    return (xp.arange(vocab_size) == tokens[..., None]).astype(xp.float32)


def one_hot_argmax(logits: Array, xp: Any) -> Array:
    """Temperature 0 as a distribution: all mass on the argmax (the first one on ties)."""
    return one_hot(xp.argmax(logits, axis=-1), logits.shape[-1], xp)


def _keep(probs: Array, mask: Array, xp: Any) -> Array:
    kept = xp.where(mask, probs, 0.0)
    return kept / kept.sum(axis=-1, keepdims=True)


def sampling_probs(logits: Array, params: SamplingParams, xp: Any) -> Array:
    """Rows of logits, shape [..., vocab], to rows of probabilities under `params`."""
    logits = logits.astype(xp.float32)
    if params.greedy:
        return one_hot_argmax(logits, xp)
    probs = softmax(logits, xp, min(1.0 / params.temperature, MAX_INVERSE_TEMPERATURE))
    vocab = probs.shape[-1]
    if 0 < params.top_k < vocab:
        kth_largest = xp.sort(probs, axis=-1)[..., vocab - params.top_k, None]
        probs = _keep(probs, probs >= kth_largest, xp)
    if params.top_p < 1:
        # Keep a token when the mass strictly more probable than it is below top_p; ascending
        # order makes the kept set a suffix, so its first entry is the cut-off probability.
        ascending = xp.sort(probs, axis=-1)
        cdf = xp.cumsum(ascending, axis=-1)
        mass_above = cdf[..., -1:] - cdf
        first_kept = (mass_above >= params.top_p).sum(axis=-1, keepdims=True)
        cutoff = xp.take_along_axis(ascending, xp.minimum(first_kept, vocab - 1), axis=-1)
        probs = _keep(probs, probs >= cutoff, xp)
    if params.min_p > 0:
        probs = _keep(probs, probs >= params.min_p * probs.max(axis=-1, keepdims=True), xp)
    return probs
