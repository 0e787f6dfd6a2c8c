"""Plots of runs: one run's learning curve, and accuracy curves of several groups of runs.

Like `fedshare.data.partition_plot`, these use matplotlib's object API on the Agg canvas (no
pyplot): they work headless, never touch the global backend, and a figure lives only until its
file is saved, so nothing stays open. Missing values (None, NaN) are left out of the lines;
an empty history gives a figure that says so, never an error.
"""

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fedshare.results.atomic import atomic_write

MB = 1e6


def _number(value: Any) -> float | None:
    """`value` as a finite float, else None (None, NaN, inf, text)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _round(record: Mapping[str, Any], position: int) -> int:
    """The record's round, else its 1-based position in the history."""
    value = _number(record.get("round"))
    return position if value is None else int(value)


def _series(history: Sequence[Mapping[str, Any]], key: str) -> tuple[list[int], list[float]]:
    """(rounds, values) of the records with a round and a finite `key`."""
    rounds, values = [], []
    for i, record in enumerate(history, start=1):
        value = _number(record.get(key))
        if value is not None:
            rounds.append(_round(record, i))
            values.append(value)
    return rounds, values


def _traffic(history: Sequence[Mapping[str, Any]]) -> tuple[list[int], list[float], list[float]]:
    """(rounds, cumulative up+down MB, cumulative shared MB) of the records with byte counts."""
    rounds, total, shared = [], [], []
    for i, record in enumerate(history, start=1):
        up, down = _number(record.get("bytes_up")), _number(record.get("bytes_down"))
        if up is None and down is None:
            continue
        rounds.append(_round(record, i))
        total.append(((up or 0.0) + (down or 0.0)) / MB)
        shared.append((_number(record.get("bytes_shared")) or 0.0) / MB)
    return rounds, total, shared


def _new_figure(rows: int, size: tuple[float, float]) -> tuple[Any, Any]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.subplots(rows, 1, sharex=True, squeeze=False)[:, 0]


def _integer_rounds(ax: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _save(fig: Any, path: Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=110))
    fig.clear()


def plot_learning_curve(
    history: Sequence[Mapping[str, Any]], path: Path, title: str | None = None
) -> None:
    """Save one run's curves to `path` (PNG): test accuracy (%) per round with the cumulative
    traffic (up+down, and shared when nonzero, in MB) on a second axis, and the test loss per
    round below. `history` is the run's `metrics.jsonl` records. A run with one evaluated
    round (a one-shot method) has no curve: its picture states the round's numbers."""
    if len(history) == 1:
        _plot_single_round(history[0], path, title)
        return
    fig, (ax_acc, ax_loss) = _new_figure(2, (7.0, 5.5))
    rounds, acc = _series(history, "accuracy")
    if acc:
        ax_acc.plot(rounds, acc, marker="o" if len(acc) <= 30 else None, ms=3, label="accuracy")
    ax_acc.set_ylabel("test accuracy (%)")
    ax_acc.grid(alpha=0.3)
    t_rounds, total, shared = _traffic(history)
    if t_rounds:
        ax_bytes = ax_acc.twinx()
        ax_bytes.plot(t_rounds, total, color="tab:gray", ls="--", label="MB up+down")
        if any(shared):
            ax_bytes.plot(t_rounds, shared, color="tab:orange", ls=":", label="MB shared")
        ax_bytes.set_ylabel("cumulative MB")
        lines = ax_acc.get_lines() + ax_bytes.get_lines()
        ax_bytes.legend(lines, [line.get_label() for line in lines], loc="lower right", fontsize=7)
    rounds, loss = _series(history, "loss")
    if loss:
        ax_loss.plot(rounds, loss, color="tab:red", marker="o" if len(loss) <= 30 else None, ms=3)
    ax_loss.set_ylabel("test loss")
    ax_loss.set_xlabel("round")
    ax_loss.grid(alpha=0.3)
    _integer_rounds(ax_loss)
    if not acc and not loss:
        ax_acc.text(
            0.5, 0.5, "no evaluated rounds", ha="center", va="center", transform=ax_acc.transAxes
        )
    if title:
        fig.suptitle(title, fontsize=9)
    _save(fig, path)


def mean_curve(points: Sequence[tuple[int, float]]) -> tuple[list[int], list[float], list[float]]:
    """(rounds, mean, std) per round of `(round, value)` points; a round given several times
    (one point per seed) gets the mean and sample std of its values, a single one std 0.
    Missing values (None, NaN) are left out."""
    by_round: dict[int, list[float]] = defaultdict(list)
    for round_idx, value in points:
        number = _number(value)
        if number is not None:
            by_round[int(round_idx)].append(number)
    rounds = sorted(by_round)
    means, stds = [], []
    for r in rounds:
        values = by_round[r]
        mean = sum(values) / len(values)
        var = sum((v - mean) ** 2 for v in values) / (len(values) - 1) if len(values) > 1 else 0.0
        means.append(mean)
        stds.append(math.sqrt(var))
    return rounds, means, stds


def plot_comparison(
    curves: Mapping[str, Sequence[tuple[int, float]]], path: Path, title: str | None = None
) -> None:
    """Save accuracy-vs-round curves of several groups to `path` (PNG). Each group is a list
    of `(round, accuracy)` points, those of all its seeds together: the line is the mean per
    round, with a shaded ±std band where a round has several values."""
    fig, (ax,) = _new_figure(1, (7.5, 4.5))
    drawn = 0
    for label, points in curves.items():
        rounds, means, stds = mean_curve(points)
        if not rounds:
            continue
        (line,) = ax.plot(
            rounds, means, label=label, marker="o" if len(rounds) <= 30 else None, ms=3
        )
        if any(stds):
            low = [m - s for m, s in zip(means, stds, strict=True)]
            high = [m + s for m, s in zip(means, stds, strict=True)]
            ax.fill_between(rounds, low, high, color=line.get_color(), alpha=0.2, lw=0)
        drawn += 1
    if drawn:
        ax.legend(fontsize=7, loc="best")
    else:
        ax.text(0.5, 0.5, "no evaluated rounds", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("round")
    ax.set_ylabel("test accuracy (%)")
    ax.grid(alpha=0.3)
    _integer_rounds(ax)
    if title:
        ax.set_title(title, fontsize=9)
    _save(fig, path)


def single_round_lines(record: Mapping[str, Any]) -> list[str]:
    """The numbers of a run's only evaluated round, one per line."""
    lines = [f"round {record.get('round', 1)} (the only evaluated round)"]
    if _number(record.get("accuracy")) is not None:
        lines.append(f"test accuracy {record['accuracy']:.2f} %")
    if _number(record.get("loss")) is not None:
        lines.append(f"test loss {record['loss']:.4f}")
    up, down = _number(record.get("bytes_up")), _number(record.get("bytes_down"))
    if up is not None or down is not None:
        lines.append(f"sent {((up or 0.0) + (down or 0.0)) / 1e6:.2f} MB up+down")
    if _number(record.get("bytes_shared")):
        lines.append(f"of which shared (not weights) {record['bytes_shared'] / 1e6:.2f} MB")
    return lines


def _plot_single_round(record: Mapping[str, Any], path: Path, title: str | None) -> None:
    fig, (ax,) = _new_figure(1, (5.0, 2.2))
    ax.axis("off")
    text = "\n".join(single_round_lines(record))
    ax.text(0.02, 0.95, text, va="top", ha="left", family="monospace", transform=ax.transAxes)
    if title:
        fig.suptitle(title, fontsize=9)
    _save(fig, path)
