"""The stats lines under each lane, made of phrases, and the widget that shows them wrapped only
between phrases at its width."""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Static

from specplay.engine.disturbance import DRIFT_LIMIT
from specplay.engine.speedup import loss_reason, measured_speedup
from specplay.engine.tree import drafted_as_chains
from specplay.ui.phrased import Line, Phrased, lines_of, phrases, prose
from specplay.ui.stats import Comparison, ConversationFigures, LaneTally, k_advice
from specplay.ui.widgets.scroll_box import ScrollBox
from specplay.ui.widgets.steady import steady_update

STATS_KEY = "\n".join(
    (
        "tokens/s: tokens after the first delivery over the time since it, on the lane's own clock",
        "first token: from the lane's start, its prefill included, to its first token",
        "draft acceptance rate: accepted over drafted tokens (positions after a rejection count as drafted)",
        "mean acceptance length: tokens a round commits, its accepted drafts and the one it ends with",
        "TV a position: how far, in total variation, the rule moved a judged position's output from the "
        "target, on average (the TV budget D bounds each one; 0 is lossless)",
        "speedup measured: this lane's tokens/s over the target-only lane's; predicted: Leviathan's formula",
        f"busy (after a measured speedup): a lane's repeated timings drifted more than {DRIFT_LIMIT:.0%} as "
        "it ran, the machine's speed moved, so the speedup is not speculation's alone (why: the last line here)",
        "per-token acceptance α: accepted over judged positions; k: drafted a round; c: a draft step's cost "
        "in target steps",
        "a round: its draft, verify and host time in target steps, against the tokens it commits",
        "in a conversation, the lines above are the last turn's; 'all N turns' is the lane over every turn",
    )
)
"""What each number of a lane's stats is, where it stands (the stats' tooltip; docs/playground.md)."""


def _num(value: float | None, fmt: str, unit: str = "") -> str:
    return "–" if value is None else f"{value:{fmt}}{unit}"


def _measured(speedup: float | None, disturbed: str | None) -> str:
    """The measured speedup, marked `busy` where the machine's speed moved while it was measured
    (the stats' tooltip says why: `stats_key`)."""
    return f"speedup {_num(speedup, '.2f', '×')} measured" + (" busy" if disturbed else "")


def stats_key(disturbed: str | None = None) -> str:
    """The stats' tooltip: what each number is, and why a measured speedup is marked busy."""
    return STATS_KEY if disturbed is None else f"{STATS_KEY}\n\nbusy: {disturbed}"


def _speed(tally: LaneTally) -> tuple[str, ...]:
    """tokens/s by the engine's one definition (after the first token), and the time to the first
    token apart: a lane's prefill and first round are not its speed."""
    return (
        f"{_num(tally.tokens_per_s, '.1f')} tokens/s",
        f"{tally.tokens} tokens",
        f"first token {_num(tally.time_to_first_token_s, '.2f', ' s')}",
    )


def target_stats(tally: LaneTally) -> Phrased:
    return lines_of(phrases(*_speed(tally), f"step {_num(tally.mean_step_ms, '.1f', ' ms')}", _finish(tally)))


def speculative_stats(tally: LaneTally, comparison: Comparison, remote: bool = False) -> Phrased:
    """`remote`: the models run on servers, so tokens/s would time HTTP round trips; the lane
    says tokens per target call and a modelled speedup instead."""
    p = comparison.prediction
    if remote:
        first = phrases(
            f"{_num(tally.mean_acceptance_length, '.2f')} tokens per target call",
            f"{tally.tokens} tokens",
            f"{tally.rounds} rounds",
            _finish(tally),
        )
        speed = phrases(f"speedup {_num(p.speedup, '.2f', '×')} modelled")
    else:
        first = phrases(*_speed(tally), f"{tally.rounds} rounds", _finish(tally))
        speed = phrases(_measured(comparison.speedup, comparison.disturbed), f"{_num(p.speedup, '.2f', '×')} predicted")
    lines: list[Line] = [
        first,
        phrases(
            f"draft acceptance rate {_num(tally.draft_acceptance_rate, '.2f')}",
            f"mean acceptance length {_num(tally.mean_acceptance_length, '.2f')}",
            f"TV {_num(tally.tv_spent_per_position, '.2f')} a position",
            tally.rule,
        ),
    ]
    if tally.counters.num_tree_rounds:  # Leviathan's formula is a chain's: a draft that branched is none
        why = ("(draft trees,", f"{_num(p.mean_k, '.1f')} nodes a round:", "the formula is a chain's)")
    else:
        why = (
            f"(per-token acceptance α {_num(p.alpha, '.2f')},",
            f"k {_num(p.mean_k, '.1f')},",
            f"c {_num(p.cost_ratio, '.2f')}{' per verify call' if remote else ''})",
        )
    lines.append((*speed, *(" " + part for part in why)))
    # Trees asked of a model that drafts chains: why, once the run's account says (at its end)
    chains = drafted_as_chains(tally.final_metrics)
    lines += [prose(f"{model} drafted chains, not trees: {why}") for model, why in chains.items()]
    if remote:
        lines.append(_exactness(tally))
    elif (a := comparison.account) is not None:
        # The measured speedup taken apart, in target steps (the formula takes verify as 1, host as 0).
        parts = (f"+ verify {a.verify_steps:.2f}", f"+ host {a.host_steps:.2f}", f"= {a.round_steps:.2f} target steps")
        tail = (f"for {a.tokens:.2f} tokens", f"→ {a.speedup:.2f}×")
        lines.append(phrases(f"a round: draft {a.draft_steps:.2f}", *parts, *tail, sep=" "))
        # Below 1× the account says which term lost, in words (nothing is added where it pays).
        # Named by the drafters that drafted, not the route last in force (a switch to none drafts nothing).
        if (loss := loss_reason(a, tally.drafting, p.mean_k, tally.draft_acceptance_rate)) is not None:
            lines.append(prose(loss.sentence))
    if not remote and (advice := k_advice(comparison)) is not None:
        lines.append(prose(advice))
    return lines_of(*lines)


def route_stats(tally: LaneTally) -> str:
    """Beside the route control: which drafters served the rounds, once more than one has
    (adaptive routing, or a live change); with counterfactual routes on, each drafter's mean
    acceptance length on this text so far, best first, and the route regret."""
    lines = []
    served = tally.counters.routes()["rounds_by_route"] or {}
    if len(served) > 1:
        ranked = sorted(served.items(), key=lambda item: -item[1]["rounds"])
        lines.append("rounds " + " ".join(f"{name} {entry['rounds']}" for name, entry in ranked))
        catch_up = f", catch-up {tally.counters.catch_up_ms:.0f} ms" if tally.counters.catch_up_ms else ""
        lines.append(f"{tally.counters.route_switches} switches{catch_up}")
    record = tally.counters.counterfactual()
    if record["counterfactual"] is not None:
        ranked = sorted(record["counterfactual"].items(), key=lambda item: -item[1]["mean_acceptance_length"])
        rounds = len(record["counterfactual_rounds"])
        lines.append(f"mean acc. length, {rounds} rounds")
        lines += [f"{name:<12} {entry['mean_acceptance_length']:.2f}" for name, entry in ranked]
        lines.append(f"route regret {record['route_regret']:.2f}")
    return "\n".join(lines)


def _exactness(tally: LaneTally) -> Line:
    total = tally.error_bound_total
    if not total:
        return prose("exact: every judged position knew both distributions")
    # Per-token bounds add up over the output; past 1 the sum says nothing (TV never exceeds 1).
    per_token = total / tally.judged if tally.judged else total
    whole = f"whole output within TV {total:.3f}" if total < 1 else "no useful bound for the whole output"
    return prose(f"approximate (top-K of p_target only): error ≤ {per_token:.3f} TV per token, {whole}")


NO_BASELINE = (
    "native mode: the speculating server has no target-only mode; start the same target on a plain "
    "vLLM server and give it as --baseline-url to compare"
)


NATIVE_SAMPLED = (
    "T > 0: vLLM keeps a greedily drafted token (its default draft_sample_method) with probability "
    "p_target(token), below what the two distributions allow; drafters started with "
    '"draft_sample_method": "probabilistic" (vllm-launch does) follow min(1, p_target/p_draft)'
)


def server_account_stats(tally: LaneTally, comparison: Comparison | None) -> Phrased:
    """A server that speculates and judges by itself (vLLM's native mode): tokens/s is real speed
    (the server's streaming), the acceptance numbers are the server's once the run ends (exact),
    the chunk-size guess before."""
    server = tally.server or {}
    speculative_decoding = server.get("speculative_decoding") or {}
    exact = "mean_acceptance_length" in speculative_decoding
    length = speculative_decoding["mean_acceptance_length"] if exact else tally.mean_acceptance_length
    rate = speculative_decoding.get("draft_acceptance_rate") if exact else tally.draft_acceptance_rate
    approx = "" if exact else "≈"
    length_shown = _num(length, ".2f")
    lines = [
        phrases(*_speed(tally), f"k {server.get('k') or '?'} (server)", _finish(tally)),
        phrases(f"draft acceptance rate {approx}{_num(rate, '.2f')}", f"mean acceptance length {approx}{length_shown}"),
    ]
    if comparison is not None:
        lines.append(
            phrases(_measured(comparison.speedup, comparison.disturbed), "against the baseline server", sep=" ")
        )
    if tally.server is None:
        notes = ["colours from chunk sizes until the run ends"]
    elif server.get("sources_exact"):
        notes = ["colours exact (the server's per-step counts)"]
    else:
        notes = ["colours approximate (chunk sizes; start the server with --per-request-spec-decode-metrics)"]
    if server.get("counters_contaminated"):
        notes.append("server counters include other requests")
    if tally.temperature > 0:  # the server's acceptance rule is its own; say what it measures
        notes.append(NATIVE_SAMPLED)
    return lines_of(*lines, *map(prose, notes))


def in_conversation(
    stats: Phrased,
    lane: ConversationFigures,
    baseline: ConversationFigures | None,
    acceptance: bool,
    speed: bool,
    disturbed: str | None = None,
) -> Phrased:
    """A lane's stats in a conversation's later turn: the turn's, named, and a line for every turn
    so far (`acceptance`: a lane whose rounds say what was accepted; `baseline`: the target-only
    lane's, to measure against; `speed`: tokens/s is one, not HTTP round trips; `disturbed`: why
    a turn's speedup was measured on a busy machine, `stats.disturbance`)."""
    figures = [f"{_num(lane.tokens_per_s, '.1f')} tokens/s"] if speed else []
    figures.append(f"{lane.tokens} tokens")
    if acceptance:
        figures += (
            f"draft acceptance rate {_num(lane.draft_acceptance_rate, '.2f')}",
            f"mean acceptance length {_num(lane.mean_acceptance_length, '.2f')}",
        )
    if baseline is not None:
        speedup = measured_speedup(lane.tokens_per_s, baseline.tokens_per_s)
        figures.append(_measured(speedup, disturbed if speedup is not None else None))
    figures[0] = f"all {lane.turns} turns: {figures[0]}"
    return stats.prefixed(f"turn {lane.turns}: ") + lines_of(phrases(*figures))


def _finish(tally: LaneTally) -> str:
    return f"[{tally.finish_reason}]" if tally.finish_reason else ""


class StatsText(Static):
    """A lane's stats, wrapped between phrases at the width it has, and again when that changes
    (Textual's own wrapping would break between any two words: "k 2.6, c" and "0.10)")."""

    def __init__(self, classes: str) -> None:
        super().__init__("", classes=classes)
        self.stats = Phrased()
        self._width = 0
        self._lines = 0

    def show(self, stats: Phrased) -> None:
        """Stats change every redraw; their height only grows (see steady_update)."""
        self.stats = stats
        self._width = self.content_size.width
        lines = stats.wrap(self._width)
        self._lines = steady_update(self, Content("\n".join(lines)), len(lines), self._lines)

    def on_resize(self) -> None:
        if self.content_size.width != self._width:
            self._lines = 0  # a new width: the height the stats need there, not the most shown
            self.show(self.stats)


class StatsBox(ScrollBox):
    """Holds a lane's StatsText: as tall as the stats, up to the rows the lane leaves it (its
    `max_height`); past those the stats scroll."""
