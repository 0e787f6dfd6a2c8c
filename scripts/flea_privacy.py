"""FLea's privacy figure (Fig. 9(b), 9(c); FLea's Sec. 4.4, App. D): UCI-HAR at the paper's
scale by default, any FLea setting with --experiment and --set.

Trains FLea on a Table 1 preset with λ2 = 3 and λ2 = 0 (constant, warm-up included),
logs the dCor of the shared activations every round, keeps the global model after the chosen
rounds, then runs the reconstruction attack (a linear decoder from the shared activations to the
raw signal, `fedshare.privacy.reconstruction`) on every kept model. Writes `privacy.json`,
prints the table as docs/flea.md shows it (one row a kept model; the doc's tables are analyses,
not table cells, typed from this output) and draws `privacy.png` (dCor per round; decoder
training MSE per epoch).

    python scripts/flea_privacy.py --root ../shared/datasets/uci_har_hapt \
        --out runs/har_privacy --rounds 30 --keep 1 10 30 --lambdas 3 0 --seed 0
    # the Fashion-MNIST trade-off of docs/flea.md (the `flea/table1 --scale fmnist` setting)
    python scripts/flea_privacy.py --experiment flea/cifar10_qua3_n100 --out runs/fmnist_privacy \
        --rounds 30 --keep 30 --lambdas 0 3 --decoders dense --attack-train 2000 --attack-test 500 \
        --set data=fmnist data.train_subset=5000 data.test_subset=1000 ~data.static_augment \
        model=lenet_fmnist model.share_layer=1 strategy.split_layer=1 clients.num=null \
        clients.samples_per_client=100 partition.seed=null train.local_epochs=2 train.batch_size=32

Each run folder is a normal fedshare run (config, metrics.jsonl, checkpoint, summary.json);
an interrupted run resumes from its checkpoint, a finished one is not trained again.
"""

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch
from hydra import compose, initialize_config_dir

from fedshare.engine.callbacks import AfterRound
from fedshare.privacy.reconstruction import DECODERS, reconstruction_attack
from fedshare.run import build_simulation, config_dir


def lambda_overrides(lam: float) -> list[str]:
    """λ2 held constant through the run, the warm-up round included."""
    return [
        "strategy.dcor_schedule=constant",
        f"strategy.dcor_weight={lam}",
        f"strategy.warmup_dcor_weight={lam}",
    ]


def run_folder(out: Path, experiment: str, lam: float, seed: int) -> Path:
    return out / f"{experiment.rsplit('/', 1)[-1]}_lambda{lam:g}_s{seed}"


def compose_run(args: argparse.Namespace, lam: float, folder: Path) -> Any:
    overrides = [
        f"experiment={args.experiment}",
        "strategy=flea",
        *([f"data.root={args.root}"] if args.root else []),
        f"rounds={args.rounds}",
        f"seed={args.seed}",
        f"run_dir={folder}",
        f"checkpoint.every={args.checkpoint_every}",
        *lambda_overrides(lam),
        *args.set,
    ]
    with initialize_config_dir(config_dir=str(config_dir()), version_base=None):
        return compose(config_name="config", overrides=overrides)


def completed(folder: Path) -> bool:
    summary = folder / "summary.json"
    return summary.exists() and json.loads(summary.read_text()).get("status") == "completed"


def kept_path(folder: Path, round_no: int) -> Path:
    return folder / "kept_models" / f"round_{round_no:03d}.pt"


def train(args: argparse.Namespace, lam: float, folder: Path) -> Any:
    """Run (or resume) FLea with λ2 = `lam`; save the global model after the kept rounds."""
    cfg = compose_run(args, lam, folder)
    sim = build_simulation(cfg, folder, {"partition": str(cfg.partition.name)})
    keep = set(args.keep)

    def keep_model(sim: Any, rounds_completed: int, record: Any) -> None:
        if rounds_completed in keep:
            path = kept_path(folder, rounds_completed)
            path.parent.mkdir(exist_ok=True)
            torch.save(sim.strategy.global_model().state_dict(), path)

    if not completed(folder):
        sim.callbacks.append(AfterRound(keep_model))
        sim.run(resume=(folder / "checkpoint.pt").exists())
    return sim


def per_round(folder: Path, key: str) -> dict[int, float]:
    """{round: value} of one metrics.jsonl key (rounds 1-based, as the file writes them)."""
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return {r["round"]: r[key] for r in records if r.get(key) is not None}


def attack(args: argparse.Namespace, sim: Any, lam: float, folder: Path) -> list[dict[str, Any]]:
    """The reconstruction attack on every kept global model of one run."""
    model = sim.model  # the global model's architecture; weights come from the kept files
    rows = []
    for round_no in args.keep:
        path = kept_path(folder, round_no)
        if not path.exists():
            print(f"no kept model after round {round_no} in {folder}", flush=True)
            continue
        model.load_state_dict(torch.load(path, map_location="cpu"))
        summary = json.loads((folder / "summary.json").read_text())
        row: dict[str, Any] = {
            "seed": args.seed,
            "lambda2": lam,
            "round": round_no,
            "best_accuracy": summary["best_accuracy"],
            "training_s": summary["wall_time_s"],
        }
        for key in ("accuracy", "shared_dcor", "train_dcor"):
            row[key] = per_round(folder, key).get(round_no)
        for decoder in args.decoders:
            start = time.perf_counter()
            result = reconstruction_attack(
                model,
                sim.data.dataset,
                split=sim.strategy.split_layer,  # None: the model's flea_layer
                train_size=args.attack_train,
                test_size=args.attack_test,
                epochs=args.attack_epochs,
                decoder=decoder,
                seed=args.seed,
            )
            row[decoder] = {
                "train_mse": result.train_mse,
                "test_mse": result.test_mse,
                "baseline_mse": result.baseline_mse,
                "relative_test_mse": result.relative_test_mse,
                "penalty": result.penalty,
                "curve": result.curve,
                "seconds": round(time.perf_counter() - start, 1),
            }
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def print_table(rows: list[dict[str, Any]], decoders: list[str]) -> None:
    """Markdown, as docs/flea.md's privacy tables: per kept model its accuracy, the run's best
    and training seconds, dCor, and each decoder's test MSE (relative to the mean's; the
    training MSE too for the decoders trained by epochs, not the closed-form ridge)."""
    head = "| seed | λ2 | round | accuracy | best acc. | shared dCor | train dCor |"
    for d in decoders:
        head += ("" if d == "ridge" else f" {d} train MSE |") + f" {d} test MSE (relative) |"
    print(head + " training s |")
    print("|---" * (head.count("|")) + "|")
    for r in rows:
        line = f"| {r['seed']} | {r['lambda2']:g} | {r['round']} | {r['accuracy']:.2f} "
        line += f"| {r['best_accuracy']:.2f} | {r['shared_dcor']:.4f} | {r['train_dcor']:.4f} |"
        for d in decoders:
            a = r[d]
            line += "" if d == "ridge" else f" {a['train_mse']:.5f} |"
            line += f" {a['test_mse']:.5f} ({a['relative_test_mse']:.3f}) |"
        print(line + f" {r['training_s']:.0f} |")


def draw(runs: dict[float, Path], rows: list[dict[str, Any]], path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 3.6))
    FigureCanvasAgg(fig)
    ax_dcor, ax_acc, ax_mse = fig.subplots(1, 3)
    for lam, folder in runs.items():
        for key, style in (("shared_dcor", "-"), ("train_dcor", ":")):
            values = per_round(folder, key)
            ax_dcor.plot(list(values), list(values.values()), style, label=f"λ2={lam:g} {key}")
        accuracy = per_round(folder, "accuracy")
        ax_acc.plot(list(accuracy), list(accuracy.values()), label=f"λ2={lam:g}")
    for row in rows:
        if "dense" in row:
            curve = row["dense"]["curve"]
            label = f"λ2={row['lambda2']:g}, round {row['round']}"
            ax_mse.plot(range(1, len(curve) + 1), curve, label=label)
    ax_dcor.set(xlabel="round", ylabel="dCor", title="(b) dCor of shared activations")
    ax_acc.set(xlabel="round", ylabel="test accuracy (%)", title="accuracy")
    ax_mse.set(
        xlabel="decoder epoch", ylabel="training MSE", yscale="log", title="(c) dense decoder"
    )
    for ax in (ax_dcor, ax_acc, ax_mse):
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--root", help="the data's folder (data.root), e.g. the UCI HAR one")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--experiment", default="flea/uci_har_qua2_n100", help="a FLea preset")
    parser.add_argument(
        "--set", nargs="+", default=[], metavar="KEY=VALUE", help="overrides after the preset"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--keep", type=int, nargs="+", default=[1, 10, 30])
    parser.add_argument("--lambdas", type=float, nargs="+", default=[3.0, 0.0])
    parser.add_argument("--checkpoint-every", type=int, default=5)
    parser.add_argument("--decoders", nargs="+", default=["dense", "ridge"], choices=DECODERS)
    parser.add_argument("--attack-train", type=int, default=4000, help="decoder training windows")
    parser.add_argument("--attack-test", type=int, default=2947)
    parser.add_argument("--attack-epochs", type=int, default=20)
    parser.add_argument("--attack-only", action="store_true", help="skip training")
    args = parser.parse_args()
    if bad := [r for r in args.keep if not 1 <= r <= args.rounds]:
        parser.error(f"--keep rounds {bad} are outside 1..{args.rounds} (the rounds run)")
    args.out.mkdir(parents=True, exist_ok=True)
    runs, rows = {}, []
    for lam in args.lambdas:
        folder = run_folder(args.out, args.experiment, lam, args.seed)
        if args.attack_only and not completed(folder):
            parser.error(f"{folder} holds no completed run; drop --attack-only to train it")
        sim = train(args, lam, folder)
        runs[lam] = folder
        rows += attack(args, sim, lam, folder)
    (args.out / "privacy.json").write_text(json.dumps(rows, indent=1))
    print_table(rows, args.decoders)
    draw(runs, rows, args.out / "privacy.png")


if __name__ == "__main__":
    main()
