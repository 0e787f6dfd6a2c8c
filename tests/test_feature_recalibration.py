"""Feature re-calibration (FLea's "CCVR" row, FLea's App. C.3): FedAvg, then a classifier
re-fitted on the server from uploaded head-input features after the last round."""

import pytest
import torch

from fedshare import simulate
from fedshare.errors import FedshareError
from fedshare.paper.compare import method_overrides
from fedshare.strategies import FeatureRecalibration, FedAvg
from helpers import DIGITS_TRAIN, digits_federation

SKEWED = {"name": "pathological", "classes_per_client": 2, "per_class": 60}


def run(strategy, rounds=3, seed=0):
    fed = digits_federation(SKEWED, 10, seed)
    return simulate(strategy, fed, "cnn_small", rounds=rounds, seed=seed, train=DIGITS_TRAIN)


def test_without_calibration_epochs_it_is_fedavg_plus_the_counted_features():
    recal, fedavg = run(FeatureRecalibration(calibration_epochs=0)), run(FedAvg())
    for a, b in zip(
        recal.strategy.model.parameters(), fedavg.strategy.model.parameters(), strict=True
    ):
        assert torch.equal(a, b)
    assert recal.accuracies == fedavg.accuracies
    # 10 % of each client's 120 samples: 12 features of 128 floats and 12 int16 labels
    features = 10 * 12 * (128 * 4 + 2)
    assert recal.summary["bytes_shared"] == features
    model = fedavg.summary["bytes_down"] // (3 * 10)  # 3 rounds × 10 clients
    assert recal.summary["bytes_down"] - fedavg.summary["bytes_down"] == 10 * model  # all, once
    assert recal.summary["bytes_up"] - fedavg.summary["bytes_up"] == features


def test_the_server_refits_the_head_after_the_last_round_only():
    recal, fedavg = run(FeatureRecalibration()), run(FedAvg())
    assert recal.accuracies[:-1] == fedavg.accuracies[:-1]
    assert "calibration_features" not in recal.history[0]
    last = recal.history[-1]
    assert last["calibration_features"] == 120
    assert last["calibration_feature_accuracy_after"] > last["calibration_feature_accuracy_before"]


def test_bad_settings_name_the_value():
    with pytest.raises(
        FedshareError, match=r"share_fraction=0 is not valid: .* number in \(0, 1\]"
    ):
        FeatureRecalibration(share_fraction=0)


def test_fleas_table_runs_its_ccvr_and_fedgen_rows_as_flea_describes_them():
    """FLea's App. C.3: its CCVR fits the features themselves and its FedGen generates inputs
    (docs/flea.md); the papers' own methods are `ccvr` and `fedgen`."""
    assert method_overrides("flea", "ccvr") == ["strategy=feature_recalibration"]
    assert method_overrides("flea", "fedgen") == ["strategy=fedgen_input"]
