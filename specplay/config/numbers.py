"""Whole numbers from the user (every integer flag, the playground's seed field), bounded by kind
before anything uses them: Python reads an integer of thousands of digits, and what it goes to
(a range, NumPy, MLX, a server) fails on it far from the flag."""

from __future__ import annotations

SEED_MAX = 2**63 - 1
"""A seed: what a server's int64 seed field and NumPy's generators take."""
COUNT_MAX = 10**8
"""Any other count (samples, steps, tokens, repeats, sizes): far beyond a real run, far below an overflow."""
MAX_CHARS = 40
"""Longer text is refused before it is converted (a 5,000-digit int() is slow, then refused)."""


def whole_number(text: str, limit: int) -> int:
    """`text` as an int of size at most `limit` (negative values pass: their own checks name them);
    ValueError with a one-line reason otherwise."""
    shown = text if len(text) <= 24 else f"{text[:12]}… ({len(text)} characters)"
    try:
        value = int(text) if len(text) <= MAX_CHARS else None
    except ValueError:
        raise ValueError(f"takes a whole number (got {shown!r})") from None
    if value is None or abs(value) > limit:
        raise ValueError(f"must be at most {limit} (got {shown})")
    return value


def seed_number(text: str) -> int:
    return whole_number(text, SEED_MAX)


def count_number(text: str) -> int:
    return whole_number(text, COUNT_MAX)
