"""The engine's own data: digits, MNIST from the data root, subsets, IID/Dirichlet splits."""

import numpy as np
import pytest
import torch

from conftest import load_real
from fedshare.data import federate, load_dataset


def test_digits_split_and_preparation():
    ds = load_dataset({"name": "digits"})
    assert ds.input_shape == (1, 8, 8) and ds.num_classes == 10
    assert len(ds.y_train) + len(ds.y_test) == 1797
    x = ds.prepare(ds.x_train)
    assert abs(float(x.mean())) < 0.1 and 0.8 < float(x.std()) < 1.2


def test_mnist_from_the_data_root():
    ds = load_real("mnist")
    assert ds.x_train.shape == (60000, 1, 28, 28) and ds.x_train.dtype == torch.uint8
    assert ds.y_test.shape == (10000,)
    assert np.bincount(ds.y_train.numpy()).tolist()[:2] == [5923, 6742]


def test_train_subset_is_class_balanced():
    ds = load_dataset({"name": "digits", "train_subset": 500}, seed=1)
    counts = np.bincount(ds.y_train.numpy(), minlength=10)
    assert counts.sum() == 500 and counts.max() - counts.min() == 0


def test_federate_covers_the_training_set_once():
    ds = load_dataset({"name": "digits"})
    for part in ("iid", {"name": "dirichlet", "alpha": 0.1, "min_size": 5}):
        fed = federate(ds, part, num_clients=20, seed=4)
        idx = torch.cat(fed.client_indices).numpy()
        assert len(idx) == len(ds.y_train) == len(np.unique(idx))


def test_samples_per_client_sets_the_client_count():
    ds = load_dataset({"name": "digits"})
    fed = federate(ds, "iid", num_clients=None, samples_per_client=100)
    assert fed.num_clients == len(ds.y_train) // 100


def test_unknown_dataset_is_a_clear_error():
    from fedshare.errors import FedshareError

    with pytest.raises(FedshareError, match=r"unknown dataset 'nope'; valid choices: .*digits"):
        load_dataset({"name": "nope"})
