"""Costs that must not grow with the clients outside the cohort (scripts/bench_scale.py)."""

import numpy as np
import pytest
import torch
from torch import nn

from fedshare.data import Dataset, make_partition, partition_plot, plot_partition
from fedshare.engine.personal_eval import (
    personal_metrics,
    personal_test_splits,
    split_accuracy,
)
from fedshare.engine.rng import numpy_rng


def _partition(num_clients: int):
    labels = np.arange(num_clients * 3) % 4
    return make_partition(labels, num_clients, {"name": "iid"}, numpy_rng(0, "partition"), 4)


@pytest.mark.parametrize("clients", [5, partition_plot.MAX_BARS + 1, 2000])
def test_partition_plot_draws_no_bar_per_client_beyond_the_limit(tmp_path, monkeypatch, clients):
    from matplotlib.axes import Axes  # imported here, not at collection (~0.5 CPU-s)

    bars = []
    original = Axes.barh

    def counting_barh(self, y, *args, **kwargs):
        bars.append(len(y))
        return original(self, y, *args, **kwargs)

    monkeypatch.setattr(Axes, "barh", counting_barh)
    path = plot_partition(_partition(clients), tmp_path / "partition.png")
    assert path.stat().st_size > 0
    assert bars == ([clients] if clients <= partition_plot.MAX_BARS else [])


class Counting(nn.Module):
    """A small linear classifier that counts its forward passes."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.fc = nn.Linear(6, 4)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.fc(x.flatten(1))


def _data(test_size: int = 300) -> Dataset:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(test_size, 6, generator=gen)
    y = torch.randint(0, 4, (test_size,), generator=gen)
    return Dataset("toy", x, y, x, y, num_classes=4)


def _splits(dataset: Dataset, clients: int, size: int = 20):
    counts = np.asarray(_partition(clients).class_counts)
    return personal_test_splits(counts, dataset.y_test, size, seed=0)


def test_a_shared_model_is_run_once_not_once_per_client():
    dataset = _data()
    splits = _splits(dataset, 500)
    model = Counting(0)
    result = personal_metrics(splits, dataset, lambda k: model)
    # the first client on its own, then the samples of every split in batches of 200
    assert model.calls <= 1 + -(-len(dataset.y_test) // 200)
    reference = [split_accuracy(model, dataset, ix) for ix in splits]
    assert result["personal_accuracy"] == pytest.approx(float(np.mean(reference)), abs=1e-9)
    assert result["personal_accuracy_min"] == pytest.approx(min(reference), abs=1e-9)


def test_a_module_reloaded_in_place_per_client_is_scored_per_client():
    """FedBN's pattern: one module object, each client's own weights copied into it."""
    dataset = _data()
    splits = _splits(dataset, 12)
    own = [Counting(k) for k in range(12)]
    reused = Counting(99)

    def model_of(k):
        with torch.no_grad():
            reused.fc.weight.copy_(own[k].fc.weight)
            reused.fc.bias.copy_(own[k].fc.bias)
        return reused

    result = personal_metrics(splits, dataset, model_of)
    reference = [split_accuracy(own[k], dataset, ix) for k, ix in enumerate(splits)]
    assert result["personal_accuracy"] == pytest.approx(float(np.mean(reference)), abs=1e-9)
    assert result["personal_accuracy_min"] == pytest.approx(min(reference), abs=1e-9)
    assert reused.calls == 12


def test_clients_alternating_between_models_are_each_scored_with_their_own():
    dataset = _data()
    splits = _splits(dataset, 9)
    models = [Counting(1), Counting(2)]
    result = personal_metrics(splits, dataset, lambda k: models[k % 2])
    reference = [split_accuracy(models[k % 2], dataset, ix) for k, ix in enumerate(splits)]
    assert result["personal_accuracy"] == pytest.approx(float(np.mean(reference)), abs=1e-9)
