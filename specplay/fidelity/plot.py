"""PNG plots of reports. matplotlib is imported only when a plot is drawn: it is slow to import."""

from __future__ import annotations

import io
from pathlib import Path

from specplay.fidelity.measure import DRAFT_ROW, TARGET_ROW, FidelityReport
from specplay.files.outputs import write_output


def plot_fidelity(report: FidelityReport, path: Path) -> Path:
    """Fidelity against speed: log-likelihood per token under the target (top) and TV spent per
    token (bottom) against the mean acceptance length, one curve per acceptance rule, each point
    a knob value; the target-only and draft-only log-likelihoods are horizontal reference lines."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display, no GUI toolkit
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(6.4, 6.8), constrained_layout=True)
    try:
        for rule in report.rules:
            rows = sorted(report.rows_of(rule), key=lambda r: r.mean_acceptance_length or 0.0)
            lengths = _nan([r.mean_acceptance_length for r in rows])
            se = [r.log_likelihood_se or 0.0 for r in rows]
            line = top.errorbar(
                lengths, _nan([r.log_likelihood_per_token for r in rows]), yerr=se, marker="o", capsize=3, label=rule
            )
            color = line.lines[0].get_color()
            for row, x, y in zip(rows, lengths, _nan([r.log_likelihood_per_token for r in rows]), strict=True):
                top.annotate(f"{row.knob:g}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize="x-small")
            bottom.plot(lengths, _nan([r.tv_spent_per_token for r in rows]), marker="o", color=color, label=rule)
        for label, style in ((TARGET_ROW, "--"), (DRAFT_ROW, ":")):
            row = report.row(label)
            value = row.log_likelihood_per_token if row is not None else None
            if value is not None:
                top.axhline(value, linestyle=style, color="grey" if label == TARGET_ROW else "tab:red", label=label)
        top.set_ylabel("log-likelihood per token\nunder the target (nats)")
        top.legend(fontsize="small")
        top.set_title(
            f"Fidelity against acceptance (drafter {report.route}, {len(report.seeds)} samples per point;\n"
            "points labelled by each rule's knob, ± 1 s.e.)",
            fontsize="medium",
        )
        bottom.set_ylabel("TV spent per token")
        bottom.set_xlabel("mean acceptance length (tokens per round)")
        image = io.BytesIO()
        fig.savefig(image, format=path.suffix.lstrip(".").lower() or "png", dpi=120)
    finally:
        plt.close(fig)
    return write_output(path, image.getvalue(), fix="choose another --plot")


def _nan(values: list[float | None]) -> list[float]:
    """matplotlib draws a gap at NaN, where a value is unknown."""
    return [float("nan") if v is None else v for v in values]
