"""Datasets, partitioners and federated splits."""

from fedshare.data.dataset import Augmentation, Dataset
from fedshare.data.datasets import DATASETS, LoadRequest, load_dataset, register_dataset
from fedshare.data.federated import FederatedData, federate
from fedshare.data.partition import PARTITIONERS, Partition, make_partition, register_partition

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
