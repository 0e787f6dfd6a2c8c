"""Before round 0: the strategy's server side set up for the run's model and data, and its
client side built (`fedshare.engine.client_side`)."""

from typing import TYPE_CHECKING

from fedshare.engine.client_side import ClientSetup, client_side
from fedshare.privacy.context import check_run_attack
from fedshare.strategies.base import SetupContext, Strategy

if TYPE_CHECKING:
    from fedshare.engine.simulation import Simulation


def set_up(sim: "Simulation") -> Strategy:
    """Set up `sim.strategy` (checking that `eval.context_attack` can attack what it shares)
    and return its client side."""
    strategy, config, dataset = sim.strategy, sim.config, sim.data.dataset
    strategy.setup(
        SetupContext(sim.model, sim.data, config, sim.device, sim.stage, sim.architectures.models)
    )
    if config.eval.context_attack:
        check_run_attack(
            strategy.context_view(), strategy.name, dataset.input_shape, config.eval.context_attack
        )
    return client_side(
        strategy,
        ClientSetup(
            sim.worker,
            config.train,
            config.seed,
            sim.device,
            dataset.num_classes,
            dataset.input_shape,
            sim.data.num_clients,
        ),
    )
