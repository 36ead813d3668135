"""The report's PNG plots. matplotlib loads only here, headless."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specplay.bench.report import Row
from specplay.engine.rules import Mentored
from specplay.files.outputs import write_in_folder


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _series(rows: Sequence[Row]) -> dict[tuple[str, float], list[Row]]:
    out: dict[tuple[str, float], list[Row]] = {}
    for row in rows:
        out.setdefault((row.category, row.temperature), []).append(row)
    return out


PLOT_FILES = ("speedup_vs_k.png", "acceptance_vs_tv.png", "acceptance_by_position.png")


def write_plots(rows: Sequence[Row], out_dir: Path) -> list[Path]:
    plt = _pyplot()
    paths = []
    figure, axis = plt.subplots(figsize=(6, 4))
    for (category, temperature), group in _series(rows).items():
        points = sorted((int(r.config[2:]), r.speedup) for r in group if r.group == "k" and r.speedup is not None)
        if points:
            axis.plot(*zip(*points, strict=True), marker="o", label=f"{category}, T={temperature:g}")
    axis.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    axis.set(xlabel="draft length k", ylabel="speedup over target-only", title="Speedup against k")
    if axis.get_legend_handles_labels()[0]:  # a sweep too short to time draws no lines
        axis.legend()
    paths.append(_save(figure, out_dir / PLOT_FILES[0], plt))

    figure, axis = plt.subplots(figsize=(6, 4))
    for (category, temperature), group in _series(rows).items():
        points = [(0.0, r.draft_acceptance_rate) for r in group if r.config == "k=4"]
        points += [(float(r.config[2:]), r.draft_acceptance_rate) for r in group if r.group == "tv"]
        points = sorted(p for p in points if p[1] is not None)
        if points:
            axis.plot(*zip(*points, strict=True), marker="o", label=f"{category}, T={temperature:g}")
    knob = f"{Mentored.knob.label} {Mentored.knob.symbol}"
    axis.set(
        xlabel=knob, ylabel="draft acceptance rate", title=f"Acceptance against {Mentored.knob.label}", ylim=(0, 1.05)
    )
    if axis.get_legend_handles_labels()[0]:  # a sweep too short to time draws no lines
        axis.legend()
    paths.append(_save(figure, out_dir / PLOT_FILES[1], plt))

    figure, axis = plt.subplots(figsize=(6, 4))
    for (category, temperature), group in _series(rows).items():
        widest = max((r for r in group if r.group == "k"), key=lambda r: len(r.acceptance_per_position), default=None)
        if widest is not None and widest.acceptance_per_position:
            positions = range(1, len(widest.acceptance_per_position) + 1)
            axis.plot(
                positions,
                widest.acceptance_per_position,
                marker="o",
                label=f"{category}, T={temperature:g} ({widest.config})",
            )
    axis.set(xlabel="draft position", ylabel="acceptance", title="Acceptance by draft position", ylim=(0, 1.05))
    if axis.get_legend_handles_labels()[0]:  # a sweep too short to time draws no lines
        axis.legend()
    paths.append(_save(figure, out_dir / PLOT_FILES[2], plt))
    return paths


def _save(figure: Any, path: Path, plt: Any) -> Path:
    figure.tight_layout()
    image = io.BytesIO()
    figure.savefig(image, format="png", dpi=110)
    plt.close(figure)
    return write_in_folder(path.parent, path.name, image.getvalue(), fix="choose another --out")
