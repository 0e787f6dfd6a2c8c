"""The Davies–Bouldin metric of FLea's Fig. 3 (`eval.davies_bouldin`)."""

import math

import pytest
import torch
from sklearn.metrics import davies_bouldin_score

from fedshare import simulate
from fedshare.metrics.separability import davies_bouldin
from helpers import DIGITS_TRAIN, digits_federation


def test_davies_bouldin_is_scikit_learns_score():
    g = torch.Generator().manual_seed(0)
    labels = torch.arange(90) % 3
    features = torch.randn(90, 5, generator=g) + labels[:, None] * 2.0
    expected = davies_bouldin_score(features.numpy(), labels.numpy())
    assert davies_bouldin(features, labels) == pytest.approx(expected, rel=1e-6)  # sklearn: fp32
    assert math.isnan(davies_bouldin(features, torch.zeros(90, dtype=torch.long)))


def test_a_run_logs_global_and_local_scores_without_changing_its_numbers():
    fed = digits_federation({"name": "pathological", "classes_per_client": 2, "per_class": 40}, 6)

    def run(flag: bool):
        return simulate(
            "fedavg",
            fed,
            "cnn_small",
            rounds=2,
            train=DIGITS_TRAIN,
            clients={"fraction": 0.5},
            eval={"davies_bouldin": flag},
        )

    measured, plain = run(True), run(False)
    assert measured.accuracies == plain.accuracies
    for record in measured.history:
        assert record["test_davies_bouldin"] > 0
        # a local model trained on two classes separates its own data better than the test set's
        assert record["local_train_davies_bouldin"] < record["local_test_davies_bouldin"]
    assert "test_davies_bouldin" not in plain.history[0]
