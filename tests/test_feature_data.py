"""Feature datasets for FedPFT (FedPFT's Sec. 4 and Sec. 5.1): a frozen backbone's cached features
(`data.features=...`), the user's own features files, the contiguous split, and the synthetic
mixture stand-in."""

import numpy as np
import pytest
import torch

from conftest import data_root_or_skip
from fedshare.data import federate, load_dataset
from fedshare.data.cache import cache_dir
from fedshare.errors import FedshareError


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDSHARE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_backbone_features_are_computed_once_and_cached(cache):
    cfg = {"name": "digits", "features": "random_relu", "features_options": {"dim": 16}}
    first = load_dataset(cfg)
    assert cache_dir() == cache and len(list(cache.glob("digits-features-*.pt"))) == 1
    second = load_dataset(cfg)
    assert first.x_train.shape == (1437, 16) and first.x_test.shape == (360, 16)
    assert torch.equal(first.x_train, second.x_train)
    assert first.default_model == "linear" and first.name == "digits+random_relu"
    assert (first.x_train >= 0).all()  # ReLU features
    other = load_dataset({**cfg, "features_options": {"dim": 16, "seed": 7}})
    assert not torch.equal(first.x_train, other.x_train)
    assert len(list(cache.glob("digits-features-*.pt"))) == 2


def test_subsets_apply_before_extraction(cache):
    data = load_dataset({"name": "digits", "train_subset": 100, "features": "random_relu"})
    assert data.x_train.shape == (100, 128) and len(data.y_train) == 100


def test_unknown_backbone_and_options_are_clear_errors(cache):
    with pytest.raises(FedshareError, match="feature backbone"):
        load_dataset({"name": "digits", "features": "clip"})
    with pytest.raises(FedshareError, match="no parameter 'width'"):
        load_dataset(
            {"name": "digits", "features": "random_relu", "features_options": {"width": 3}}
        )
    with pytest.raises(FedshareError, match="features_weights"):
        load_dataset({"name": "digits", "features": "resnet50"})


def test_resnet20_features_of_the_cifar10_sample(cache):
    """The pretrained ResNet-20 as a frozen extractor: 64-d features on which a nearest class
    mean already separates the CIFAR-10 test images well."""
    root = data_root_or_skip("cifar10_sample/train.npz", "pretrained/cifar10_resnet20")
    data = load_dataset(
        {
            "name": "cifar10_sample",
            "root": str(root),
            "train_subset": 300,
            "test_subset": 200,
            "features": "resnet20_cifar",
        }
    )
    assert data.x_train.shape == (300, 64) and torch.isfinite(data.x_train).all()
    means = torch.stack([data.x_train[data.y_train == c].mean(0) for c in range(10)])
    pred = torch.cdist(data.x_test, means).argmin(1)
    assert float((pred == data.y_test).float().mean()) > 0.7


def write_features(
    path,
    n_train,
    n_test,
    d,
    classes,
    seed,
    fmt="pt",
    keys=("x_train", "y_train", "x_test", "y_test"),
):
    rng = np.random.default_rng(seed)
    arrays = {
        keys[0]: rng.normal(size=(n_train, d)).astype(np.float32),
        keys[1]: rng.integers(classes, size=n_train),
        keys[2]: rng.normal(size=(n_test, d)).astype(np.float32),
        keys[3]: rng.integers(classes, size=n_test),
    }
    if fmt == "npz":
        np.savez(path, **arrays)
    else:
        torch.save({k: torch.from_numpy(np.asarray(v)) for k, v in arrays.items()}, path)
    return arrays


def test_features_file_in_both_formats(tmp_path):
    a = write_features(tmp_path / "a.pt", 40, 10, 5, 3, 0)
    b = write_features(
        tmp_path / "b.npz",
        30,
        8,
        5,
        4,
        1,
        "npz",
        ("train_features", "train_labels", "test_features", "test_labels"),
    )
    one = load_dataset({"name": "features_file", "path": str(tmp_path / "a.pt")})
    assert one.num_classes == 3 and one.default_model == "linear"
    np.testing.assert_allclose(one.x_train.numpy(), a["x_train"])
    two = load_dataset(
        {
            "name": "features_file",
            "path": [str(tmp_path / "a.pt"), str(tmp_path / "b.npz")],
            "disjoint_labels": True,
        }
    )
    assert two.num_classes == 7 and len(two.y_train) == 70 and len(two.y_test) == 18
    assert torch.equal(two.y_train[40:], torch.from_numpy(b["train_labels"]) + 3)
    shared = load_dataset(
        {"name": "features_file", "path": [str(tmp_path / "a.pt"), str(tmp_path / "b.npz")]}
    )
    assert shared.num_classes == 4 and torch.equal(
        shared.y_train[40:], torch.from_numpy(b["train_labels"])
    )
    fed = federate(two, {"name": "contiguous", "sizes": [40, 30]}, 2, 0)
    assert fed.client_indices[0].tolist() == list(range(40))
    assert set(fed.dataset.y_train[fed.client_indices[1]].tolist()) <= {3, 4, 5, 6}


def test_features_file_errors(tmp_path):
    with pytest.raises(FedshareError, match=r"data\.path"):
        load_dataset({"name": "features_file"})
    with pytest.raises(FedshareError, match="not found"):
        load_dataset({"name": "features_file", "path": str(tmp_path / "none.pt")})
    torch.save({"x_train": torch.zeros(3, 2)}, tmp_path / "bad.pt")
    with pytest.raises(FedshareError, match="no y_train"):
        load_dataset({"name": "features_file", "path": str(tmp_path / "bad.pt")})
    with pytest.raises(FedshareError, match=r"partition\.sizes"):
        federate(
            load_dataset({"name": "synthetic_mixture", "train_size": 50}),
            {"name": "contiguous", "sizes": [10, 10]},
            2,
            0,
        )


def test_synthetic_mixture_is_seeded_and_balanced():
    a = load_dataset({"name": "synthetic_mixture", "train_size": 300, "test_size": 100})
    b = load_dataset({"name": "synthetic_mixture", "train_size": 300, "test_size": 100})
    assert torch.equal(a.x_train, b.x_train) and a.x_train.shape == (300, 32)
    assert torch.bincount(a.y_train).tolist() == [30] * 10
