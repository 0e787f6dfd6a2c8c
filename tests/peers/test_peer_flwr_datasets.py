"""The Dirichlet label skew against flwr-datasets' `DirichletPartitioner` (self-balancing, the
same minimum size), statistically: over many seeds both give clients the same mean label
entropy and the same spread of client sizes. The two draw differently (fedshare shuffles each
class before cutting it; Flower caps a client strictly above N/K, fedshare at N/K), so the
comparison is of distributions, not of splits."""

import numpy as np
import pytest

from fedshare.data.label_skew import dirichlet

pytestmark = pytest.mark.peers
pytest.importorskip("flwr_datasets", reason="flwr-datasets is not installed")

from datasets import Dataset  # noqa: E402
from flwr_datasets.partitioner import DirichletPartitioner  # noqa: E402

LABELS = np.repeat(np.arange(10), 300)
CLIENTS = 10
MIN_SIZE = 10
SEEDS = range(60)


def label_entropy(parts: list[np.ndarray]) -> float:
    """The clients' mean entropy (nats) of their label histograms."""
    entropies = []
    for labels in parts:
        p = np.bincount(labels, minlength=10) / len(labels)
        p = p[p > 0]
        entropies.append(float(-(p * np.log(p)).sum()))
    return float(np.mean(entropies))


def size_spread(parts: list[np.ndarray]) -> float:
    """The coefficient of variation of the clients' sizes."""
    sizes = np.array([len(p) for p in parts])
    return float(sizes.std() / sizes.mean())


def fedshare_parts(alpha: float, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [LABELS[ix] for ix in dirichlet(LABELS, CLIENTS, rng, alpha=alpha, min_size=MIN_SIZE)]


def flower_parts(alpha: float, seed: int) -> list[np.ndarray]:
    partitioner = DirichletPartitioner(
        num_partitions=CLIENTS,
        partition_by="label",
        alpha=alpha,
        min_partition_size=MIN_SIZE,
        self_balancing=True,
        seed=seed,
    )
    partitioner.dataset = Dataset.from_dict({"label": LABELS.tolist()})
    return [np.array(partitioner.load_partition(k)["label"]) for k in range(CLIENTS)]


def agree(ours: list[float], theirs: list[float]) -> bool:
    """Means within 4 standard errors of their difference."""
    se = np.sqrt(np.var(ours, ddof=1) / len(ours) + np.var(theirs, ddof=1) / len(theirs))
    return abs(np.mean(ours) - np.mean(theirs)) < 4 * se


@pytest.mark.parametrize("alpha", [0.1, 0.5, 5.0])
def test_dirichlet_label_entropy_and_sizes_match_flwr_datasets(alpha):
    ours = [fedshare_parts(alpha, s) for s in SEEDS]
    theirs = [flower_parts(alpha, 1000 + s) for s in SEEDS]
    assert agree([label_entropy(p) for p in ours], [label_entropy(p) for p in theirs])
    assert agree([size_spread(p) for p in ours], [size_spread(p) for p in theirs])


def test_the_comparison_separates_neighbouring_alphas():
    """The test can fail: α = 0.5 against Flower's α = 0.3 is told apart."""
    ours = [label_entropy(fedshare_parts(0.5, s)) for s in SEEDS]
    theirs = [label_entropy(flower_parts(0.3, 1000 + s)) for s in SEEDS]
    assert not agree(ours, theirs)
