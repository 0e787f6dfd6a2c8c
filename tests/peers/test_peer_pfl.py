"""FedAvg and FedProx against pfl-research's own algorithms (Apple's `pfl`), sample-weighted
(`WeightByDatapoints`), on the shared deterministic setting (peer_setup.py)."""

import pytest
import torch
import torch.nn.functional as F
from peer_setup import (
    ATOL,
    EPOCHS,
    LR,
    ROUNDS,
    client_tensors,
    flat,
    linear_model,
    run_fedshare,
    unequal_federation,
)
from torch import nn

from fedshare.strategies import FedAvg, FedProx

pytestmark = pytest.mark.peers
pfl = pytest.importorskip("pfl", reason="pfl-research is not installed (the `bench` extra)")

from pfl.aggregate.simulate import SimulatedBackend  # noqa: E402
from pfl.aggregate.weighting import WeightByDatapoints  # noqa: E402
from pfl.algorithm import FederatedAveraging, NNAlgorithmParams  # noqa: E402
from pfl.algorithm.fedprox import FedProx as PflFedProx  # noqa: E402
from pfl.algorithm.fedprox import FedProxParams  # noqa: E402
from pfl.data.federated_dataset import FederatedDataset  # noqa: E402
from pfl.data.pytorch import PyTorchTensorDataset  # noqa: E402
from pfl.data.sampling import get_user_sampler  # noqa: E402
from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams  # noqa: E402
from pfl.metrics import Weighted  # noqa: E402
from pfl.model.pytorch import PyTorchModel  # noqa: E402


class _PflNet(nn.Module):
    """pfl's PyTorch models carry their own loss and metrics."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def loss(self, x: torch.Tensor, y: torch.Tensor, eval: bool = False) -> torch.Tensor:
        return F.cross_entropy(self(x), y)

    def metrics(self, x: torch.Tensor, y: torch.Tensor, eval: bool = True) -> dict:
        with torch.no_grad():
            return {"loss": Weighted(F.cross_entropy(self(x), y, reduction="sum").item(), len(y))}


def run_pfl(fed, algorithm, params_cls=NNAlgorithmParams, weighted=True, **params) -> torch.Tensor:
    """pfl's final parameters: every client every round, full-batch local SGD, the averaged
    model difference applied by a central SGD at lr 1 (pfl's FedAvg)."""
    data = client_tensors(fed)
    users = FederatedDataset(
        lambda uid: PyTorchTensorDataset(data[int(uid)], user_id=str(uid)),
        get_user_sampler("minimize_reuse", list(range(len(data)))),
    )
    net = _PflNet(linear_model())
    model = PyTorchModel(
        model=net,
        local_optimizer_create=torch.optim.SGD,
        central_optimizer=torch.optim.SGD(net.parameters(), lr=1.0),
    )
    backend = SimulatedBackend(
        training_data=users,
        val_data=users,
        postprocessors=[WeightByDatapoints()] if weighted else [],
    )
    algorithm.run(
        algorithm_params=params_cls(
            central_num_iterations=ROUNDS,
            evaluation_frequency=10**6,
            train_cohort_size=len(data),
            val_cohort_size=None,
            **params,
        ),
        backend=backend,
        model=model,
        model_train_params=NNTrainHyperParams(
            local_num_epochs=EPOCHS, local_learning_rate=LR, local_batch_size=None
        ),
        model_eval_params=NNEvalHyperParams(local_batch_size=None),
    )
    return flat(net.net)


def test_fedavg_equals_pfls_sample_weighted_federated_averaging():
    fed = unequal_federation()
    ours, _ = run_fedshare(FedAvg(), fed)
    theirs = run_pfl(fed, FederatedAveraging())
    start = flat(linear_model())
    assert (ours - start).abs().max() > 0.05  # the runs moved the model
    torch.testing.assert_close(ours, theirs, rtol=0, atol=ATOL)
    # the clients' sizes differ, so pfl's default per-user mean is another model
    unweighted = run_pfl(fed, FederatedAveraging(), weighted=False)
    assert (ours - unweighted).abs().max() > 100 * ATOL


def test_fedprox_equals_pfls_fedprox():
    fed = unequal_federation()
    ours, _ = run_fedshare(FedProx(mu=0.5), fed)
    theirs = run_pfl(fed, PflFedProx(), FedProxParams, mu=0.5)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=ATOL)
    fedavg, _ = run_fedshare(FedAvg(), fed)
    assert (ours - fedavg).abs().max() > 100 * ATOL  # μ = 0.5 is felt


def scaffold_by_hand(fed, sign: float) -> torch.Tensor:
    """SCAFFOLD option II written out, every client every round, full-batch steps
    y ← y − η(∇L_i(y) + c − c_i), c_i⁺ = c_i − c + sign·(x − y_i)/(Kη),
    c ← c + (|S|/N)·mean(Δc_i), x ← x + mean(y_i − x) (equal client sizes): `sign` = 1 is the
    paper's, −1 builds the variates from y − x as pfl does."""
    data = client_tensors(fed)
    x = flat(linear_model())
    c = torch.zeros_like(x)
    cs = [torch.zeros_like(x) for _ in data]

    def gradient(theta, inputs, labels):
        w = theta[:640].view(10, 64).clone().requires_grad_(True)
        b = theta[640:].clone().requires_grad_(True)
        F.cross_entropy(inputs.flatten(1) @ w.T + b, labels).backward()
        return torch.cat([w.grad.reshape(-1), b.grad])

    for _ in range(ROUNDS):
        ys, dcs = [], []
        for k, (inputs, labels) in enumerate(data):
            y = x.clone()
            for _ in range(EPOCHS):
                y = y - LR * (gradient(y, inputs, labels) + c - cs[k])
            new_c = cs[k] - c + sign * (x - y) / (EPOCHS * LR)
            dcs.append(new_c - cs[k])
            cs[k] = new_c
            ys.append(y)
        x = x + torch.stack(ys).mean(0) - x
        c = c + torch.stack(dcs).mean(0)  # |S| = N
    return x


def test_pfls_scaffold_is_the_negated_variates_and_fedshares_the_papers():
    """What docs/baselines.md records of pfl 0.6's SCAFFOLD, checked on its own code."""
    from peer_setup import equal_federation
    from pfl.algorithm.scaffold import SCAFFOLD, SCAFFOLDParams
    from pfl.data.user_state import InMemoryUserStateStorage

    from fedshare.strategies import Scaffold

    fed = equal_federation(3)
    ours, _ = run_fedshare(Scaffold(), fed)
    theirs = run_pfl(
        fed,
        SCAFFOLD(),
        SCAFFOLDParams,
        population=3,
        use_gradient_as_control_variate=False,
        user_state_storage=InMemoryUserStateStorage(),
    )
    papers, negated = scaffold_by_hand(fed, 1.0), scaffold_by_hand(fed, -1.0)
    assert (papers - negated).abs().max() > 100 * ATOL  # the two readings are told apart
    torch.testing.assert_close(ours, papers, rtol=0, atol=ATOL)
    torch.testing.assert_close(theirs, negated, rtol=0, atol=ATOL)
