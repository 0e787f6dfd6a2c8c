"""Personal evaluation: each client's model on a test split with the client's label mix."""

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from fedshare import simulate
from fedshare.engine.personal_eval import personal_test_splits
from fedshare.strategies import FedAvg
from helpers import DIGITS_TRAIN, digits_federation

PAT = {"name": "pathological", "classes_per_client": 2, "per_class": 40}


def test_splits_follow_each_clients_label_mix():
    fed = digits_federation(PAT, 5)
    counts = np.asarray(fed.partition.class_counts)
    y = fed.dataset.y_test
    splits = personal_test_splits(counts, y, 50, seed=0)
    for client, split in enumerate(splits):
        assert len(split) == 50 and len(set(split.tolist())) == 50
        held = set(np.flatnonzero(counts[client]).tolist())
        assert set(y[split].tolist()) <= held
    again = personal_test_splits(counts, y, 50, seed=0)
    assert all(torch.equal(a, b) for a, b in zip(splits, again, strict=True))


@dataclass
class MajorityClassLocally(FedAvg):
    """Its personal model always predicts the client's most frequent training class."""

    def personal_model(self, client_id, state):
        top = int(np.argmax(self.data.partition.class_counts[client_id]))
        classes = self.data.dataset.num_classes

        class Constant(nn.Module):
            def forward(self, x):
                return nn.functional.one_hot(
                    torch.full((len(x),), top, device=x.device), classes
                ).float()

        return Constant()


def test_records_carry_the_mean_and_lowest_client_accuracy():
    fed = digits_federation(PAT, 5)
    options = {"train": DIGITS_TRAIN, "eval": {"personal": True, "personal_size": 40}}
    plain = simulate(FedAvg(), fed, "cnn_small", rounds=1, **options)
    record = plain.history[-1]
    assert 0 <= record["personal_accuracy_min"] <= record["personal_accuracy"] <= 100
    local = simulate(MajorityClassLocally(), fed, "cnn_small", rounds=1, **options)
    # two classes of 40 each: the constant model scores half of every client's split
    assert local.history[-1]["personal_accuracy"] == 50.0
    assert local.history[-1]["accuracy"] == plain.history[-1]["accuracy"]


def test_a_client_whose_classes_have_no_test_sample_is_refused_before_round_0():
    """Client 1 holds only class 2, which the test set lacks: one sentence naming the client
    and its classes, raised when the run begins (the splits are drawn in `on_begin`)."""
    from types import SimpleNamespace

    import pytest

    from fedshare.config import EvalConfig
    from fedshare.engine.evaluation import Evaluation
    from fedshare.errors import FedshareError

    counts = np.array([[3, 2, 0], [0, 0, 5]])
    labels = torch.tensor([0, 0, 1, 1, 1])
    with pytest.raises(FedshareError, match=r"client 1's classes \(2\) have no sample among the 5"):
        personal_test_splits(counts, labels, 4, seed=0)
    sim = SimpleNamespace(
        config=SimpleNamespace(eval=EvalConfig(personal=True, personal_size=4), seed=0),
        worker=nn.Linear(2, 3),
        architectures=SimpleNamespace(models=None),
        data=SimpleNamespace(
            partition=SimpleNamespace(class_counts=counts),
            dataset=SimpleNamespace(y_test=labels),
        ),
    )
    with pytest.raises(FedshareError, match="client 1's classes"):
        Evaluation().on_begin(sim)
