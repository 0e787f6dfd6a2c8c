"""Evaluate the FLea authors' own trained HARNet on a UCI-HAR test set.

The authors' repository (github.com/XTxiatong/FLea) ships, beside its HAR training log, the
server model that run saved: `models/saved/server_FLea_HARNet_UCI_HAR_loss_MCE_DeC_KL_epoch_5_
100_client_150_split_distribution_0.1.pt`, FLea on UCI-HAR, K = 150, Dir(0.1), seed 0. Their
server saves the model whenever the test accuracy rises, so the file holds the log's best round
(70.21 % on the official test set, `fedshare.paper.logs`). It is pickled whole; it is read here
without their code (`fedshare.models.weights.load_pickled_module_state`) into fedshare's
`harnet` and evaluated on each sensor triple of the test set given. On the official files the
body_acc row must give the log's best; on another copy of the data (the rebuild from HAPT) the
difference says how much that copy moves a fixed, fully trained model:

    git -C <FLea clone> show HEAD:models/saved/server_FLea_HARNet_UCI_HAR_loss_MCE_DeC_KL_\
epoch_5_100_client_150_split_distribution_0.1.pt > flea_harnet.pt
    python scripts/flea_official_model.py flea_harnet.pt --root ../shared/datasets/uci_har_hapt
"""

import argparse
import json
from pathlib import Path
from typing import Any

import torch

from fedshare.data.datasets import load_dataset
from fedshare.engine.evaluation import evaluate
from fedshare.models.base import build_model
from fedshare.models.weights import load_into, load_pickled_module_state, positional_rename
from fedshare.paper.logs import load_log

AUTHORS_PACKAGES = ("FLAlgorithms",)
LOG = "flea_har_k150_dir0.1"
CLASSES = ("walk", "up", "down", "sit", "stand", "lie")
"""UCI-HAR's six activities in label order (walking, upstairs, downstairs, sitting, standing,
lying), as the docs' table names them."""
TRIPLES = {
    "body_acc": ("body_acc_x", "body_acc_y", "body_acc_z"),
    "body_gyro": ("body_gyro_x", "body_gyro_y", "body_gyro_z"),
    "total_acc": ("total_acc_x", "total_acc_y", "total_acc_z"),
}


def evaluate_official_model(
    state: dict[str, torch.Tensor], path: Path, root: str | None, triple: str
) -> dict[str, Any]:
    """Test accuracy (overall and per class) of the authors' HARNet `state` (read from `path`)
    on one sensor triple."""
    data = load_dataset({"name": "uci_har", "root": root, "channels": list(TRIPLES[triple])})
    model = build_model("harnet", data.input_shape, data.num_classes)
    load_into(model, state, path, rename=positional_rename(state, model).__getitem__)
    result = evaluate(model, data, per_class=True)
    return {"channels": triple, "data_source": data.source, **result}


def markdown(rows: list[dict[str, Any]], best: float) -> str:
    """The rows as docs/flea.md's table: accuracy, its difference to the log's best and the
    accuracy per class (UCI-HAR's label order)."""
    source = " / ".join(dict.fromkeys(str(r["data_source"]) for r in rows))
    classes = ", ".join(CLASSES)
    lines = [
        f"| test windows ({source}) | accuracy | Δ to {best:.2f} | per class ({classes}) |",
        "|---|---|---|---|",
    ]
    for row in rows:
        delta = f"{row['accuracy'] - best:+.2f}".replace("-", "−")
        per_class = ", ".join(f"{a:.1f}" for a in row["per_class_accuracy"])
        lines.append(f"| {row['channels']} x/y/z | {row['accuracy']:.2f} | {delta} | {per_class} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path, help="the authors' saved server model (.pt)")
    parser.add_argument("--root", help="a folder holding `UCI HAR Dataset` (or uci_har_hapt/)")
    parser.add_argument("--channels", nargs="+", choices=sorted(TRIPLES), default=list(TRIPLES))
    parser.add_argument("--out", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args()
    best = max(load_log(LOG).accuracy)
    state = load_pickled_module_state(args.model, AUTHORS_PACKAGES)
    rows = [evaluate_official_model(state, args.model, args.root, t) for t in args.channels]
    print(f"the authors' log: best round {best:.2f} % on the official test set")
    print(markdown(rows, best))
    if args.out:
        args.out.write_text(json.dumps({"log_best": best, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
