"""CCVR (Luo et al., NeurIPS 2021): per-class feature statistics pooled exactly on the server,
virtual features drawn from the class Gaussians, the classifier re-trained on them."""

import pytest
import torch

from fedshare import simulate
from fedshare.errors import FedshareError
from fedshare.functional.class_gaussians import (
    PooledClassGaussians,
    class_statistics,
    pack_symmetric,
    sample_virtual_features,
    unpack_symmetric,
)
from fedshare.strategies import CCVR, FedAvg
from fedshare.strategies._feature_heads import extract
from helpers import DIGITS_TRAIN, digits_federation

SKEWED = {"name": "pathological", "classes_per_client": 2, "per_class": 60}


def clients_of_unequal_shape(seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Three clients whose class means differ (so the between-client term matters), with unequal
    counts per class (so the count weighting matters), one class held by one sample, one class
    missing on a client."""
    gen = torch.Generator().manual_seed(seed)
    shapes = [{0: 40, 1: 5}, {0: 7, 1: 30, 2: 1}, {1: 3, 2: 25}]
    clients = []
    for k, counts in enumerate(shapes):
        feats, labels = [], []
        for c, n in counts.items():
            shift = torch.full((6,), 3.0 * k + c)
            feats.append(torch.randn(n, 6, generator=gen, dtype=torch.float64) * (k + 1) + shift)
            labels.append(torch.full((n,), c))
        clients.append((torch.cat(feats), torch.cat(labels)))
    return clients


def test_pooled_statistics_equal_those_of_the_pooled_features():
    clients = clients_of_unequal_shape()
    pooled = PooledClassGaussians(num_classes=4, dim=6)
    for feats, labels in clients:
        pooled.add(class_statistics(feats, labels))
    got = pooled.result()
    want = class_statistics(torch.cat([f for f, _ in clients]), torch.cat([y for _, y in clients]))
    assert got.classes.tolist() == [0, 1, 2]  # class 3: nobody holds it, no Gaussian
    assert torch.equal(got.counts, want.counts)
    torch.testing.assert_close(got.means, want.means, rtol=0, atol=1e-12)
    torch.testing.assert_close(got.covariances, want.covariances, rtol=0, atol=1e-10)


def test_client_statistics_are_the_unbiased_mean_and_covariance_per_class():
    feats, labels = clients_of_unequal_shape()[1]
    stats = class_statistics(feats, labels)
    assert stats.classes.tolist() == [0, 1, 2]
    assert stats.counts.tolist() == [7, 30, 1]
    class1 = feats[labels == 1]
    torch.testing.assert_close(stats.means[1], class1.mean(0))
    torch.testing.assert_close(stats.covariances[1], torch.cov(class1.T))
    assert torch.equal(stats.covariances[2], torch.zeros(6, 6))  # one sample: no spread


def test_single_samples_of_a_class_on_two_clients_pool_into_their_spread():
    """A class held by one sample on each of two clients: each upload has covariance 0, the
    pooled Gaussian has the spread between them (N_c = 2, Σ_c by the unbiased formula); a
    class with one sample in all keeps covariance 0; a class nobody holds has no Gaussian."""
    pooled = PooledClassGaussians(num_classes=3, dim=2)
    one = torch.tensor([[0.0, 0.0], [5.0, -1.0]], dtype=torch.float64)
    pooled.add(class_statistics(one, torch.tensor([0, 1])))
    pooled.add(class_statistics(torch.tensor([[2.0, 4.0]], dtype=torch.float64), torch.tensor([0])))
    got = pooled.result()
    assert got.classes.tolist() == [0, 1] and got.counts.tolist() == [2, 1]
    torch.testing.assert_close(got.means, torch.tensor([[1.0, 2.0], [5.0, -1.0]]).double())
    # class 0: (0, 0) and (2, 4): deviations ±(1, 2), summed outer products / (2 − 1)
    spread = torch.tensor([[2.0, 4.0], [4.0, 8.0]]).double()
    torch.testing.assert_close(got.covariances, torch.stack([spread, torch.zeros(2, 2).double()]))
    both = class_statistics(
        torch.cat([one[:1], torch.tensor([[2.0, 4.0]]).double()]), torch.tensor([0, 0])
    )
    assert torch.equal(both.covariances[0], spread)  # the same two samples on one client


def test_symmetric_packing_round_trips_and_halves_the_numbers():
    a = torch.randn(3, 5, 5, dtype=torch.float64)
    sym = a + a.transpose(1, 2)
    packed = pack_symmetric(sym)
    assert packed.shape == (3, 15)
    assert torch.equal(unpack_symmetric(packed, 5), sym)


def test_virtual_features_follow_their_class_gaussian_and_carry_its_label():
    feats, labels = clients_of_unequal_shape()[0]
    pooled = PooledClassGaussians(num_classes=3, dim=6)
    pooled.add(class_statistics(feats, labels))
    stats = pooled.result()
    x, y = sample_virtual_features(stats, 20000, torch.Generator().manual_seed(0))
    assert y.tolist() == [0] * 20000 + [1] * 20000
    for i, c in enumerate(stats.classes.tolist()):
        drawn = x[y == c].double()
        torch.testing.assert_close(drawn.mean(0), stats.means[i], rtol=0, atol=0.1)
        torch.testing.assert_close(torch.cov(drawn.T), stats.covariances[i], rtol=0.1, atol=0.15)


def test_a_singular_covariance_still_samples_around_its_mean():
    feats = torch.tensor([[1.0, 2.0, 0.0], [3.0, 2.0, 0.0]], dtype=torch.float64)  # rank 1
    stats = class_statistics(feats, torch.tensor([4, 4]))
    x, y = sample_virtual_features(stats, 500, torch.Generator().manual_seed(1))
    assert torch.isfinite(x).all() and set(y.tolist()) == {4}
    assert torch.allclose(x[:, 1:], torch.tensor([2.0, 0.0]).expand(500, 2), atol=1e-4)


def run(strategy, rounds=3, seed=0):
    fed = digits_federation(SKEWED, 10, seed)
    return simulate(strategy, fed, "cnn_small", rounds=rounds, seed=seed, train=DIGITS_TRAIN)


def test_without_calibration_epochs_it_is_fedavg_plus_the_counted_statistics():
    ccvr, fedavg = run(CCVR(calibration_epochs=0)), run(FedAvg())
    for a, b in zip(
        ccvr.strategy.model.parameters(), fedavg.strategy.model.parameters(), strict=True
    ):
        assert torch.equal(a, b)
    assert ccvr.accuracies == fedavg.accuracies
    # 10 clients × 2 classes: label (int16), count (int32), mean (128 float32) and the
    # covariance's upper triangle (128·129/2 float32)
    statistics = 10 * 2 * (2 + 4 + 128 * 4 + 128 * 129 // 2 * 4)
    assert ccvr.summary["bytes_shared"] == statistics
    assert ccvr.summary["bytes_up"] - fedavg.summary["bytes_up"] == statistics
    assert ccvr.summary["statistic_groups"] == 20
    assert ccvr.summary["smallest_statistic_group"] == 60
    assert ccvr.summary["single_sample_statistics"] == 0


def test_the_server_pools_every_clients_statistics_and_recalibrates_the_head():
    ccvr, fedavg = run(CCVR()), run(FedAvg())
    assert ccvr.accuracies[:-1] == fedavg.accuracies[:-1]
    strategy = ccvr.strategy
    fed = digits_federation(SKEWED, 10, 0)
    x, y = fed.dataset.train_batch(torch.cat(fed.client_indices))
    # the extractor is not touched by the calibration: the global model's features of every
    # training sample are what the clients summarised
    want = class_statistics(extract(strategy.model, x), y)
    got = strategy.class_gaussians
    assert torch.equal(got.counts, want.counts)
    torch.testing.assert_close(got.means, want.means, rtol=0, atol=1e-4)
    torch.testing.assert_close(got.covariances, want.covariances, rtol=0, atol=1e-3)
    last = ccvr.history[-1]
    assert last["virtual_features"] == 10 * 100
    assert last["virtual_accuracy_after"] > last["virtual_accuracy_before"]
    assert ccvr.accuracies[-1] > fedavg.accuracies[-1] + 20  # measured: 75.6 vs 17.2 (4 rounds)


def test_summary_counts_the_groups_of_one_sample():
    ccvr = CCVR()
    ccvr.group_sizes = [2, 1, 60, 1]
    assert ccvr.summary_metrics() == {
        "statistic_groups": 4,
        "smallest_statistic_group": 1,
        "single_sample_statistics": 2,
    }


def test_bad_settings_name_the_value():
    with pytest.raises(FedshareError, match=r"virtual_per_class=0"):
        CCVR(virtual_per_class=0)
    with pytest.raises(FedshareError, match=r"calibration_lr=0"):
        CCVR(calibration_lr=0)
