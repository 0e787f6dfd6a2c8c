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
