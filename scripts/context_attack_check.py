"""FLea's Fig. 9(d) context-identification attack on the CIFAR-10 sample (docs/flea.md): the
attacker's test accuracy per training-set size for raw images (FedData), averages of 10
(FedMix) and single-image activations after layer1 of the CIFAR ResNet-20, pretrained or
randomly initialised (FLea's view, without FLea's decorrelation training).

    FEDSHARE_DATA=../shared/datasets python scripts/context_attack_check.py
"""

import argparse
import os
import time

import torch

from fedshare.data import load_dataset
from fedshare.models import build_model
from fedshare.privacy.context import context_attack

SIZES = (30, 100, 300, 1000, 3000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    args = parser.parse_args()
    torch.set_num_threads(1)
    data = load_dataset({"name": "cifar10_sample"})
    views: list[tuple[str, dict]] = [("raw", {}), ("average", {})]
    for pretrained in (True, False):
        model = build_model(
            "resnet20_cifar",
            data.input_shape,
            data.num_classes,
            {"pretrained": pretrained, "data_root": os.environ.get("FEDSHARE_DATA")},
        ).eval()
        views.append(("features", {"model": model, "pretrained": pretrained}))
    for view, extra in views:
        start = time.time()
        label = view if view != "features" else f"features (pretrained={extra.pop('pretrained')})"
        result = context_attack(data, view, sizes=args.sizes, seed=args.seed, **extra)
        curve = {n: round(a, 1) for n, a in result.accuracy.items()}
        print(f"{label}: {curve}, 90 % at {result.samples_for(90)}, {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
