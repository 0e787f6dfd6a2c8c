"""What shared class prototypes reveal of the clients' inputs (FedProto, FedTGP, FedGH).

A prototype is one vector per (client, class), the mean feature of the client's samples of
that class, so no single sample leaves the client; what it can carry is the class's mean input.
The measure pairs, for every (client, class) prototype a round's uploads hold, the client's
mean prepared input of that class x̄ with the prototype p, and reports the distance correlation
dCor(x̄, p) over the round's pairs (one chunk, `fedshare.privacy.dcor`), as FLea's
`shared_dcor` does for its shared activations and their source inputs. dCor's finite-sample
bias depends on the number of pairs n, so each value comes with its shuffled baseline, the
mean dCor over random re-pairings of the same vectors (what independence gives at that n), and
the permutation p-value, the share of re-pairings at least as high. Measurement only: the
server's algorithm never reads it, and its random draws leave the run's streams untouched.
"""

from typing import Any

import torch

from fedshare.data.federated import FederatedData
from fedshare.engine.rng import torch_generator
from fedshare.privacy.dcor import mean_distance_correlation

PERMUTATIONS = 200
"""Random re-pairings behind the baseline and the p-value."""


class PrototypeLeakage:
    """Collects a round's (mean input, prototype) pairs (`add`) and measures them (`measure`)."""

    def __init__(self, data: FederatedData, num_classes: int, seed: int) -> None:
        self.data, self.num_classes, self.seed = data, num_classes, seed
        self._means: dict[int, torch.Tensor] = {}
        self._inputs: list[torch.Tensor] = []
        self._prototypes: list[torch.Tensor] = []
        self.last: dict[str, Any] = {}
        """The latest round's measure (summary.json; checkpointed by the strategy)."""

    def class_means(self, client_id: int) -> torch.Tensor:
        """(C, D) mean prepared input of each class over client `client_id`'s samples (zeros
        for a class it lacks); computed once per client."""
        if client_id not in self._means:
            dataset = self.data.dataset
            idx = self.data.client_indices[client_id]
            x = dataset.prepare(dataset.x_train[idx]).flatten(1).double().cpu()
            y = dataset.y_train[idx].cpu()
            sums = torch.zeros(self.num_classes, x.shape[1], dtype=torch.float64)
            sums.index_add_(0, y, x)
            counts = torch.bincount(y, minlength=self.num_classes).clamp_min(1)
            self._means[client_id] = sums / counts.unsqueeze(1)
        return self._means[client_id]

    def add(self, client_id: int, prototypes: torch.Tensor, classes: torch.Tensor) -> None:
        """Client `client_id` shared `prototypes[i]` for class `classes[i]`."""
        classes = classes.cpu()
        self._inputs.append(self.class_means(client_id)[classes])
        self._prototypes.append(prototypes.detach().double().cpu())

    def measure(self, round_idx: int) -> dict[str, Any]:
        """`prototype_dcor`, its `prototype_dcor_baseline`, `prototype_dcor_p` and the number
        of pairs `prototype_pairs`, over the pairs added since the last call (empty with fewer
        than 4 pairs, too few for dCor)."""
        inputs, prototypes = self._inputs, self._prototypes
        self._inputs, self._prototypes = [], []
        if not inputs:
            return {}
        x, p = torch.cat(inputs), torch.cat(prototypes)
        value = mean_distance_correlation(x, p, chunk=len(x))
        if value is None:
            return {}
        draws = torch_generator(self.seed, "prototype_leakage", round_idx)
        shuffled = [
            mean_distance_correlation(x, p[torch.randperm(len(x), generator=draws)], chunk=len(x))
            for _ in range(PERMUTATIONS)
        ]
        values = [s for s in shuffled if s is not None]
        self.last = {
            "prototype_dcor": value,
            "prototype_dcor_baseline": sum(values) / len(values),
            "prototype_dcor_p": sum(s >= value for s in values) / len(values),
            "prototype_pairs": len(x),
        }
        return dict(self.last)
