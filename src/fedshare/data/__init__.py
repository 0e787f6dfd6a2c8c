"""Datasets, partitioners and federated splits."""

from fedshare.data import audio, feature_files, images, sensors, synthetic_features  # noqa: F401  (registers the loaders)  # noqa: F401  (FedPFT's feature data)
from fedshare.data.dataset import Augmentation, Dataset
from fedshare.data.datasets import DATASETS, LoadRequest, load_dataset, register_dataset
from fedshare.data.federated import FederatedData, federate
from fedshare.data.partition_plot import plot_partition as plot_partition
from fedshare.data.partitioners import PARTITIONERS, Partition, make_partition, register_partition
from fedshare.data.partitioners import Split as Split
from fedshare.data.shift import apply_domain_shift as apply_domain_shift

__all__ = [
    "DATASETS",
    "PARTITIONERS",
    "Augmentation",
    "Dataset",
    "FederatedData",
    "LoadRequest",
    "Partition",
    "federate",
    "load_dataset",
    "make_partition",
    "register_dataset",
    "register_partition",
]
