"""FedPFT's communication-accuracy frontier (Figs. 1/4 stand-in, FedPFT's Sec. 5.2), plotted
from the cells of `fedpft/table5 --scale frontier`: the one-shot methods as points and the
multi-round heads as curves over their rounds, accuracy against the bytes sent so far (up +
down + peer, the engine's counts; a one-shot method's final download included).

    python -m fedshare.reproduce run fedpft/table5 --scale frontier --out runs/frontier
    python scripts/fedpft_frontier.py runs/frontier --plot docs/img/fedpft_frontier.png

The table of the same cells (final accuracy per seed, MB sent) is `python -m fedshare.reproduce
report fedpft/table5 runs/frontier` (docs/fedpft.md).
"""

import argparse
from pathlib import Path

from fedshare.reproduce import cells
from fedshare.reproduce.launch import DONE, state_of
from fedshare.reproduce.measure import bytes_sent
from fedshare.results.runs import load_run

TABLE, SCALE = "fedpft/table5", "frontier"


def curve(folder: Path) -> tuple[list[float], list[float], bool]:
    """A run's bytes sent (MB) and accuracy per evaluated round, and whether it is multi-round;
    the last point counts the run's final bytes (a one-shot method's download)."""
    run = load_run(folder)
    rows = [r for r in run["history"] if r.get("accuracy") is not None]
    sent = [(bytes_sent(r) or 0.0) / 1e6 for r in rows]
    sent[-1] = (bytes_sent(run["summary"]) or 0.0) / 1e6
    return sent, [float(r["accuracy"]) for r in rows], int(run["summary"]["rounds"]) > 1


def plot(out: Path, seed: int, path: Path) -> None:
    """Every completed cell of seed `seed` under `out` on one figure, written to `path`."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8.4, 4.2))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    markers = iter("o^sDvP*X")
    for cell in cells(TABLE, SCALE, seeds=[seed]):
        folder = out / cell.folder
        if state_of(folder) != DONE:
            continue
        sent, accuracy, multi = curve(folder)
        if multi:
            ax.plot(sent, accuracy, label=cell.method)
            continue
        ax.scatter(
            sent,
            accuracy,
            label=f"{cell.method} (one shot)",
            marker=next(markers),
            s=60,
            edgecolors="black",
            zorder=3,
        )
    ax.set_xscale("log")
    ax.set_xlabel("bytes sent, up + down + peer (MB, log scale)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(f"CIFAR-10 sample, ResNet-20 features, 10 clients, Dir(0.1), seed {seed}")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help=f"the folder `run {TABLE} --scale {SCALE}` wrote")
    parser.add_argument("--seed", type=int, default=0, help="the seed plotted (default 0)")
    parser.add_argument("--plot", type=Path, default=None, help="PNG (default: <out>/frontier.png)")
    args = parser.parse_args()
    plot(args.out, args.seed, args.plot or args.out / "frontier.png")


if __name__ == "__main__":
    main()
