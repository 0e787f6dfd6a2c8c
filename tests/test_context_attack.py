"""The context-identification attack of FLea's Fig. 9(d) (FLea's Sec. 4.4, App. D)."""

import json

import pytest
import torch

from fedshare import simulate
from fedshare.data import federate, load_dataset
from fedshare.data.dataset import Dataset
from fedshare.errors import FedshareError
from fedshare.models import build_model
from fedshare.privacy.context import ContextAttack, context_attack, stamp
from helpers import DIGITS_TRAIN, digits_federation


def noise_images(n: int = 600) -> Dataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 200, (n, 3, 16, 16), generator=g, dtype=torch.uint8)
    y = torch.zeros(n, dtype=torch.long)
    return Dataset("noise", x, y, x[:300].clone(), y[:300], 1, scale=1 / 255)


def test_the_marker_is_a_full_intensity_square_in_channel_zero():
    data = noise_images(4)
    marked = stamp(data.x_train, data)
    assert (marked[:, 0, 2:7, 2:7] == 255).all()
    changed = marked != data.x_train
    changed[:, 0, 2:7, 2:7] = False
    assert not changed.any() and not (data.x_train[:, 0, 2:7, 2:7] == 255).all()
    with pytest.raises(FedshareError, match="at least 7×7"):
        stamp(torch.zeros(2, 1, 5, 5), data)


@pytest.mark.parametrize("view", ["raw", "average", "features"])
def test_the_attacker_finds_the_marker_when_it_shows(view):
    data = noise_images()
    model = build_model("cnn_small", (3, 16, 16), 2) if view == "features" else None
    result = context_attack(data, view, model, sizes=(40, 300), test_size=200, epochs=20, seed=0)
    assert set(result.accuracy) == {40, 300}
    assert result.accuracy[300] >= 90.0
    assert result.samples_for(90.0) in (40, 300)


def test_reading_off_the_samples_needed():
    attack = ContextAttack({100: 60.0, 300: 91.0, 1000: 99.0})
    assert attack.samples_for(90) == 300 and attack.samples_for(99.5) is None
    with pytest.raises(FedshareError, match="view 'pixels' is not one of: raw, average"):
        context_attack(noise_images(10), "pixels")


@pytest.mark.parametrize(("name", "view"), [("fedmix", "average"), ("flea", "features")])
def test_eval_context_attack_reports_in_the_summary_of_a_sharing_strategy(name, view, tmp_path):

    result = simulate(
        name,
        digits_federation("dirichlet", 6),
        "cnn_small",
        rounds=1,
        train=DIGITS_TRAIN,
        eval={"context_attack": [50, 100]},
        run_dir=tmp_path,
    )
    summary = result.summary
    assert summary["context_attack_view"] == view
    assert set(summary["context_attack_accuracy"]) == {"50", "100"}
    assert all(0 <= a <= 100 for a in summary["context_attack_accuracy"].values())
    written = json.loads((tmp_path / "summary.json").read_text())
    assert written["context_attack_accuracy"] == summary["context_attack_accuracy"]


def test_eval_context_attack_is_refused_before_round_zero_where_it_cannot_run(tmp_path):

    with pytest.raises(FedshareError, match="strategy=fedavg shares none"):
        simulate(
            "fedavg",
            digits_federation("iid", 4),
            "cnn_small",
            rounds=1,
            train=DIGITS_TRAIN,
            eval={"context_attack": [100]},
            run_dir=tmp_path / "a",
        )
    assert (
        not (tmp_path / "a" / "metrics.jsonl").exists()
        or not (tmp_path / "a" / "metrics.jsonl").read_text()
    )
    flat = federate(
        load_dataset({"name": "synthetic", "train_size": 200, "test_size": 50}), "iid", 4, 0
    )
    with pytest.raises(FedshareError, match="C×H×W images of at least 7×7"):
        simulate("fedmix", flat, "mlp", rounds=1, eval={"context_attack": [100]})
    with pytest.raises(FedshareError, match="at least 2"):
        simulate(
            "fedmix",
            digits_federation("iid", 4),
            "cnn_small",
            rounds=1,
            eval={"context_attack": [1]},
        )
