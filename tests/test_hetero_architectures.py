"""The family with clients of different architectures, driven by hand as the engine will drive
it once `clients.models` assigns them: each client step gets a worker of its own architecture
(`client.model`), and only the shared width d and the classes cross clients."""

import pytest
import torch

from fedshare.config import SimulationConfig, TrainConfig
from fedshare.engine.client import Client
from fedshare.engine.client_side import ClientSetup, client_side
from fedshare.models import build_model
from fedshare.strategies import make_strategy
from fedshare.strategies._personal import PERSONAL
from fedshare.strategies.base import SetupContext, Strategy, Update
from fedshare.strategies.fedkd import unfactor_flat
from helpers import digits_federation

D = 64
ARCHITECTURES = (
    ("cnn_small", {"hidden": D}),  # the run's model, also client 0's
    ("cnn4", {"padding": 2, "feature_dim": D}),
    ("resnet8", {"feature_dim": D, "width": 0.5}),
)
FAMILY = ("local_only", "fedproto", "fd", "lg_fedavg", "fedgh", "fedtgp", "fml", "fedkd", "fedmrl")
SMALL = {"fedtgp": {"server_epochs": 2}}


def two_rounds(name: str) -> tuple[list[dict], list[Update], Strategy]:
    """Two rounds of `name` on three digits clients, client k on architecture k."""
    data = digits_federation("iid", len(ARCHITECTURES), train_subset=300)
    shape, classes = data.dataset.input_shape, data.dataset.num_classes
    torch.manual_seed(0)
    workers = [build_model(arch, shape, classes, params) for arch, params in ARCHITECTURES]
    run_model = build_model(*ARCHITECTURES[0][:1], shape, classes, ARCHITECTURES[0][1])
    config = SimulationConfig(device="cpu", rounds=2)
    train = TrainConfig(local_epochs=1, batch_size=32, lr=0.05)
    strategy = make_strategy(name, SMALL.get(name))
    cpu = torch.device("cpu")
    strategy.setup(SetupContext(run_model, data, config, cpu))
    setup = ClientSetup(run_model, train, 0, cpu, classes, shape, len(workers))
    clients_side = client_side(strategy, setup)
    states: list[dict] = [{} for _ in workers]
    for round_idx in range(2):
        message = strategy.broadcast(round_idx)
        updates = []
        for k, worker in enumerate(workers):
            client = Client(
                k,
                round_idx,
                data.client_indices[k],
                data.dataset,
                worker,
                train,
                0,
                state=states[k],
            )
            updates.append(clients_side.client_update(client, message))
        strategy.aggregate(iter(updates), round_idx)
    return states, updates, strategy


@pytest.mark.parametrize("name", FAMILY)
def test_each_client_trains_its_own_architecture(name):
    states, updates, strategy = two_rounds(name)
    sizes = [state[PERSONAL].numel() for state in states]
    assert len(set(sizes)) == len(ARCHITECTURES)  # three architectures, three model sizes
    if name == "fedkd":  # the mentee's SVD factors: their ranks vary, the mentee does not
        uploads = [unfactor_flat(strategy.flat, u.payload).shape for u in updates]
    else:
        uploads = [{k: v.shape for k, v in u.payload.items()} for u in updates]
    assert all(upload == uploads[0] for upload in uploads)  # what is shared fits every model
    weights = [None if u.weights is None else u.weights.numel() for u in updates]
    assert len(set(weights)) == 1  # shared weights (a head, a meme model) too
