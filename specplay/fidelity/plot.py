"""PNG plots of reports. matplotlib is imported only when a plot is drawn: it is slow to import."""

from __future__ import annotations

import io
from pathlib import Path

from specplay.fidelity.measure import DRAFT_ROW, TARGET_ROW, FidelityReport
from specplay.store.files import write_output


def plot_fidelity(report: FidelityReport, path: Path) -> Path:
    """Log-likelihood per token and draft acceptance rate against the TV budget, with the
    target-only and draft-only log-likelihoods as horizontal reference lines."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display, no GUI toolkit
    import matplotlib.pyplot as plt

    rows = report.speculative_rows
    budgets = [r.tv_budget for r in rows]
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(6.4, 6.4), constrained_layout=True)
    try:
        ll = [r.log_likelihood_per_token for r in rows]
        se = [r.log_likelihood_se or 0.0 for r in rows]
        top.errorbar(budgets, _nan(ll), yerr=se, marker="o", capsize=3, label="speculative (± 1 s.e.)")
        for label, style in ((TARGET_ROW, "--"), (DRAFT_ROW, ":")):
            row = report.row(label)
            value = row.log_likelihood_per_token if row is not None else None
            if value is not None:
                top.axhline(value, linestyle=style, color="grey" if label == TARGET_ROW else "tab:red", label=label)
        top.set_ylabel("log-likelihood per token\nunder the target (nats)")
        top.legend(fontsize="small")
        top.set_title(f"Fidelity against TV budget (drafter {report.route}, {len(report.seeds)} samples per point)")

        bottom.plot(budgets, _nan([r.draft_acceptance_rate for r in rows]), marker="o", color="tab:green")
        bottom.set_ylim(0, 1.02)
        bottom.set_ylabel("draft acceptance rate")
        bottom.set_xlabel("TV budget D")
        image = io.BytesIO()
        fig.savefig(image, format=path.suffix.lstrip(".").lower() or "png", dpi=120)
    finally:
        plt.close(fig)
    return write_output(path, image.getvalue(), fix="choose another --plot")


def _nan(values: list[float | None]) -> list[float]:
    """matplotlib draws a gap at NaN, where a value is unknown."""
    return [float("nan") if v is None else v for v in values]
