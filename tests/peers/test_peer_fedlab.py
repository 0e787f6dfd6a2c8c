"""SCAFFOLD against FedLab's own `ScaffoldSerialClientTrainer` + `ScaffoldServerHandler` at equal
client sizes (FedLab averages the clients unweighted), with partial participation: FedLab is
driven with the cohorts fedshare drew, so its |S|/N step of the server control variate is
exercised too."""

import pytest
import torch
from peer_setup import (
    ATOL,
    EPOCHS,
    LR,
    ROUNDS,
    client_tensors,
    equal_federation,
    flat,
    linear_model,
    run_fedshare,
)

from fedshare.strategies import Scaffold

pytestmark = pytest.mark.peers
pytest.importorskip("fedlab", reason="FedLab is not installed (the `bench` extra)")

from fedlab.contrib.algorithm.scaffold import (  # noqa: E402
    ScaffoldSerialClientTrainer,
    ScaffoldServerHandler,
)


class _FullBatches:
    """FedLab's dataset interface: one full batch per client."""

    def __init__(self, tensors: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        self.tensors = tensors

    def get_dataloader(self, client: int, batch_size: int) -> list:
        return [self.tensors[client]]


def run_fedlab_scaffold(fed, cohorts: list[list[int]]) -> torch.Tensor:
    num_clients = len(fed.client_sizes)
    server = ScaffoldServerHandler(linear_model(), ROUNDS, len(cohorts[0]) / num_clients)
    server.num_clients = num_clients
    server.setup_optim(lr=1.0)
    trainer = ScaffoldSerialClientTrainer(linear_model(), num_clients)
    trainer.setup_dataset(_FullBatches(client_tensors(fed)))
    trainer.setup_optim(EPOCHS, 10_000, LR)
    for cohort in cohorts:
        trainer.local_process(server.downlink_package, cohort)
        for pack in trainer.uplink_package:
            server.load(pack)
    return flat(server.model)


def test_scaffold_equals_fedlabs_at_equal_client_sizes_with_partial_participation():
    fed = equal_federation(3)
    ours, cohorts = run_fedshare(Scaffold(), fed, clients={"per_round": 2})
    assert len({k for c in cohorts for k in c}) == 3  # clients return with their c_i
    theirs = run_fedlab_scaffold(fed, cohorts)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=ATOL)
    assert (ours - flat(linear_model())).abs().max() > 0.05


def test_scaffold_without_controls_differs_from_fedlabs():
    """The comparison can fail: SCAFFOLD with the controls frozen at 0 (FedAvg) is farther."""
    fed = equal_federation(3)
    frozen, cohorts = run_fedshare(Scaffold(update_controls=False), fed, clients={"per_round": 2})
    theirs = run_fedlab_scaffold(fed, cohorts)
    assert (frozen - theirs).abs().max() > 100 * ATOL


def test_fedlabs_feddyn_client_trains_as_its_fedavg_client():
    """What docs/baselines.md records of FedLab 1.3's FedDyn: its regulariser is built from
    `model_parameters`, a detached copy, so its gradient is zero and the client's model after
    training equals FedLab's plain SGD client's (fedshare's FedDyn is compared with the paper's
    equations in test_scaffold_feddyn.py instead)."""
    from fedlab.contrib.algorithm.basic_client import SGDSerialClientTrainer
    from fedlab.contrib.algorithm.feddyn import FedDynSerialClientTrainer

    fed = equal_federation(3)
    data = _FullBatches(client_tensors(fed))
    start = flat(linear_model())
    dyn = FedDynSerialClientTrainer(linear_model(), 3)
    dyn.setup_dataset(data)
    dyn.setup_optim(EPOCHS, 10_000, LR, alpha=0.5)
    plain = SGDSerialClientTrainer(linear_model(), 3)
    plain.setup_dataset(data)
    plain.setup_optim(EPOCHS, 10_000, LR)
    for _ in range(2):  # the second pass has a nonzero L_t, which would move a live regulariser
        dyn.local_process([start], [0])
        plain.local_process([start], [0])
        (dyn_model,), (plain_model,) = dyn.uplink_package[0], plain.uplink_package[0]
        torch.testing.assert_close(dyn_model, plain_model, rtol=0, atol=0)
    assert dyn_model.sub(start).abs().max() > 0.05
