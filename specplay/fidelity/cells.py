"""A fidelity row as table cells: the terminal's table and the review page show the same numbers."""

from __future__ import annotations

from specplay.fidelity.measure import FidelityRow


def _number(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def row_cells(row: FidelityRow, speed_measured: bool) -> list[str]:
    """label, acceptance rate, mean acceptance length, tokens/s, log-likelihood ± s.e., distinct-1,
    distinct-2, mean length, similarity to target-only, TV spent per token."""
    # Where wall time is HTTP round trips (vLLM inspection), a speculative row's tokens/s is no speed.
    tokens_per_s = row.tokens_per_s if speed_measured or row.mode != "speculative" else None
    ll = _number(row.log_likelihood_per_token)
    if row.log_likelihood_se is not None:
        ll += f" ± {row.log_likelihood_se:.2f}"
    own_spread = row.mode == "target" and row.similarity_to_target is not None
    return [
        row.label,
        _number(row.draft_acceptance_rate),
        _number(row.mean_acceptance_length),
        _number(tokens_per_s, 1),
        ll,
        _number(row.distinct_1),
        _number(row.distinct_2),
        _number(row.mean_length, 1),
        # The target-only row's is between its own samples (each against the others): the spread of
        # the target alone, which the other rows' similarities are read against; marked so.
        _number(row.similarity_to_target) + ("*" if own_spread else ""),
        _number(row.tv_spent_per_token, 3),
    ]
