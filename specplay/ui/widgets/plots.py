"""Terminal plots of the speculative lane: acceptance by draft position, tokens/s over time, and
(once measured) the verify pass's cost by rows with the rows of the k in use marked.

Pure text from the lane tallies, so the plots cost a string per redraw and depend only on the
events (and the lanes' clocks), never on when the screen happened to redraw.
"""

from __future__ import annotations

from collections.abc import Sequence

from textual.content import Content
from textual.widgets import Static

from specplay.display.text import counted
from specplay.engine.costs import RoundCosts
from specplay.engine.settings import NONE_ROUTE
from specplay.ui.stats import LaneTally
from specplay.ui.widgets.steady import steady_update

BLOCKS = " ▏▎▍▌▋▊▉█"
SPARKS = "▁▂▃▄▅▆▇█"


def bar(fraction: float, width: int) -> str:
    """A horizontal bar `width` cells wide at 1.0, in eighths of a cell."""
    eighths = round(max(0.0, min(1.0, fraction)) * width * 8)
    full, rest = divmod(eighths, 8)
    return ("█" * full + (BLOCKS[rest] if rest else "")).ljust(width)


def sparkline(values: Sequence[float]) -> str:
    top = max(values, default=0.0)
    if top <= 0:
        return SPARKS[0] * len(values)
    return "".join(SPARKS[min(len(SPARKS) - 1, int(v / top * (len(SPARKS) - 1) + 0.5))] for v in values)


def throughput(samples: Sequence[tuple[float, int]], bins: int) -> list[float]:
    """Tokens/s in `bins` equal slices of the lane's own time, from (busy_s, tokens so far) samples."""
    if len(samples) < 2 or bins < 1:
        return []
    start, end = samples[0][0], samples[-1][0]
    if end <= start:
        return []
    width = (end - start) / bins
    counts = [0.0] * bins
    previous = samples[0][1]
    for busy_s, tokens in samples[1:]:
        counts[min(bins - 1, int((busy_s - start) / width))] += tokens - previous
        previous = tokens
    return [count / width for count in counts]


def verify_curve(costs: RoundCosts, k: int | None) -> list[Content | str]:
    """The verify pass by rows, in target steps, as a sparkline from 1 row on; the rows a round of
    the k in use scores (k + 1) marked below it."""
    steps = [t.ms / costs.target_step_ms.ms for t in costs.verify_ms.values()]
    rows = list(costs.verify_ms)
    lines: list[Content | str] = [
        Content.styled(f"verify by rows, 1..{rows[-1]}  ({min(steps):.2f}-{max(steps):.2f} target steps)", "bold"),
        Content.styled(sparkline(steps), "$spec-corrected"),
    ]
    if k is not None and k + 1 in rows:
        at = rows.index(k + 1)
        lines.append(" " * at + f"▲ k {k}: {steps[at]:.2f}")
    return lines


def no_acceptance(speculative: LaneTally) -> str:
    """Why the lane has no acceptance by position to show: none of its rounds yet, a run that ended
    before its first round, or rounds that drafted nothing (route `none`)."""
    rounds = speculative.rounds
    if rounds == 0:
        if speculative.finish_reason is not None:
            return "the run ended before its first round: no drafts to judge"
        return "no rounds yet"
    if speculative.drafted == 0:
        spent = counted(rounds, "round")
        if speculative.drafting == f"route {NONE_ROUTE}":
            return f"route {NONE_ROUTE} drafts nothing: {spent} of the target alone, no drafts to judge"
        return f"{speculative.drafting} drafted nothing in {spent}: no drafts to judge"
    return "no position judged yet"


def plots_content(speculative: LaneTally, width: int, costs: RoundCosts | None = None, k: int | None = None) -> Content:
    lines: list[Content | str] = [Content.styled("acceptance by draft position", "bold")]
    rates = speculative.acceptance_per_position()
    bar_width = max(4, width - 12)
    for i, rate in enumerate(rates[:16], 1):
        lines.append(
            Content.assemble(f"{i:>2} ", Content.styled(bar(rate, bar_width), "$spec-accepted"), f" {rate:.2f}")
        )
    if not rates:
        lines.append(Content.styled(no_acceptance(speculative), "dim"))
    series = throughput(speculative.samples, max(4, width - 2))
    tps = speculative.tokens_per_s
    lines.append(Content.styled("tokens/s over time" + (f"  (now {tps:.1f})" if tps else ""), "bold"))
    lines.append(Content.styled(sparkline(series), "$spec-bonus") if series else Content.styled("no tokens yet", "dim"))
    if costs is not None:
        lines += verify_curve(costs, k)
    return Content("\n").join(lines)


class Plots(Static):
    DEFAULT_CSS = """
    Plots { border: round $spec-border; padding: 0 1; height: auto; max-height: 22; }
    """

    def __init__(self, id: str | None = None) -> None:
        super().__init__("", id=id)
        self.border_title = "speculative lane"
        self._lines = 0

    def show(self, speculative: LaneTally, costs: RoundCosts | None = None, k: int | None = None) -> None:
        """`k`: the k in use, marked on the verify curve."""
        content = plots_content(speculative, max(16, self.content_size.width or 32), costs, k)
        self._lines = steady_update(self, content, content.plain.count("\n") + 1, self._lines)
