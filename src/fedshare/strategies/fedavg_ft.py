"""FedAvg-FT (ReBaFL's Fig. 1, Section 3.3): FedAvg, then the server re-trains the
classifier head on its own small labelled, class-balanced set every round.

The authors' code takes 300 samples (30 per class) from the test set and fine-tunes the head
for 5 epochs with SGD lr 0.01, momentum 0.5, weight decay 5e-4 (the run's local-training
settings). Here the set is `server_data.size=300` carved from the *training* set before the
partition (no test sample is trained on: a deviation that removes a leak), and the optimizer is
the run's `train` settings at the round's learning rate.
"""

from collections.abc import Iterable
from dataclasses import dataclass

from fedshare.config.rules import EPOCHS, ruled
from fedshare.engine.optim import learning_rate
from fedshare.engine.rng import seed_global_torch, torch_generator
from fedshare.errors import FedshareError
from fedshare.models.base import as_block_model, require_body
from fedshare.strategies._central import train_central
from fedshare.strategies.base import SetupContext, Update, register_strategy
from fedshare.strategies.fedavg import FedAvg


@register_strategy("fedavg_ft")
@dataclass
class FedAvgFT(FedAvg):
    """FedAvg whose aggregated model's head is fine-tuned on the server's labelled data."""

    head_epochs: int = ruled(
        5,
        EPOCHS,
        source="code: ReBaFL's code (JianXu95/ReBaFL at 62834da, running.py L497: the head "
        "re-trained epoch_classifier = 5 epochs a round; ReBaFL §3.3, Fig. 1)",
    )
    """Epochs of head re-training per round (0: plain FedAvg)."""

    def setup(self, ctx: SetupContext) -> None:
        require_body(ctx.model, self.name)
        if ctx.data.server_indices is None or not ctx.data.server_labelled:
            raise FedshareError(
                "strategy fedavg_ft re-trains the head on the server's labelled data; set "
                "server_data.size (ReBaFL's code: 300, i.e. 30 per class)"
            )
        super().setup(ctx)

    def aggregate(self, updates: Iterable[Update], round_idx: int) -> None:
        super().aggregate(updates, round_idx)
        if self.head_epochs:
            self.fine_tune_head(round_idx)

    def fine_tune_head(self, round_idx: int) -> None:
        """Train the head alone (the body frozen, BatchNorm statistics included)."""
        cfg, data, model = self.config, self.data, as_block_model(self.model)
        x = data.dataset.x_train[data.server_indices]
        y = data.dataset.y_train[data.server_indices]
        seed_global_torch(cfg.seed, "server/head", round_idx)
        gen = torch_generator(cfg.seed, "server/head", round_idx, device=self.device)
        lr = learning_rate(cfg.train, round_idx)
        model.freeze()
        try:
            loss = train_central(model, x, y, data.dataset, cfg.train, lr, self.head_epochs, gen)
        finally:
            model.freeze(0)
        self.round_metrics["server_head_loss"] = loss
