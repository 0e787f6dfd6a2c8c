"""What a client step may touch: its own data, its random streams, the worker model, its state."""

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch
from torch import nn

from fedshare.config import TrainConfig
from fedshare.data.dataset import Dataset
from fedshare.engine.optim import learning_rate, make_optimizer
from fedshare.engine.rng import torch_generator
from fedshare.engine.training import shuffled_positions

Samples = tuple[torch.Tensor, torch.Tensor]


class Client:
    """One client in one round (or phase of a round).

    Its data are reached only through positions into its own sample list (`data`, `raw`,
    `labels`, `batches`); the run's other samples stay out of reach. `model` is the single
    worker model the engine reuses for every client: load weights into it in place, never
    deepcopy it. `state` is the client's own persistent state (kept by the engine between
    participations, checkpointed; write tensors into it); `personal` is the message addressed
    to this client alone, if its phase sends one; `kept` holds the messages of `keep` phases it
    received earlier (a one-shot pool), by phase name; `inbox` the messages other clients sent
    it since its last step (`Update.to_peers`), in the order they were sent.
    """

    def __init__(
        self,
        id: int,
        round: int,
        indices: torch.Tensor,
        dataset: Dataset,
        model: nn.Module,
        train: TrainConfig,
        seed: int,
        phase: str = "train",
        state: dict[str, torch.Tensor] | None = None,
        personal: Any = None,
        kept: Mapping[str, Any] | None = None,
        inbox: list[Any] | None = None,
    ) -> None:
        self.id = id
        self.round = round
        self.model = model
        self.train = train
        self.seed = seed
        self.phase = phase
        self.state = {} if state is None else state
        self.personal = personal
        self.kept = dict(kept or {})
        self.inbox = list(inbox or [])
        self._indices = indices
        self._dataset = dataset

    # ------------------------------------------------------------------ facts
    @property
    def num_samples(self) -> int:
        return int(self._indices.numel())

    @property
    def device(self) -> torch.device:
        return self._indices.device

    @property
    def num_classes(self) -> int:
        return self._dataset.num_classes

    @property
    def scale(self) -> float:
        """The factor that turns stored inputs into [0, 1] (e.g. 1/255 for uint8 images)."""
        return self._dataset.scale

    @property
    def amp_device(self) -> str | None:
        """Where local losses run under bf16 autocast (`train.amp`), for `training.fit`."""
        return self.device.type if self.train.amp else None

    @property
    def lr(self) -> float:
        return learning_rate(self.train, self.round)

    def rng(self, purpose: str) -> torch.Generator:
        """A generator on the run device for (seed, purpose, round, client)."""
        return torch_generator(
            self.seed, f"{self.phase}/{purpose}", self.round, self.id, device=self.device
        )

    def make_optimizer(
        self, params: Iterable[torch.nn.Parameter] | None = None
    ) -> torch.optim.Optimizer:
        """The configured optimizer at this round's learning rate (default: all model params)."""
        return make_optimizer(
            self.model.parameters() if params is None else params, self.train, self.lr
        )

    # ------------------------------------------------------------------ its own data
    def _global(self, positions: torch.Tensor | None) -> torch.Tensor:
        return self._indices if positions is None else self._indices[positions]

    def data(self, positions: torch.Tensor | None = None) -> Samples:
        """Its samples at `positions` (default: all), prepared without augmentation."""
        return self._dataset.train_batch(self._global(positions))

    def raw(self, positions: torch.Tensor | None = None) -> Samples:
        """Its stored samples at `positions` (default: all) as stored (uint8 images stay)."""
        idx = self._global(positions)
        return self._dataset.x_train[idx], self._dataset.y_train[idx]

    @property
    def labels(self) -> torch.Tensor:
        return self._dataset.y_train[self._indices]

    def prepare(
        self, raw: torch.Tensor, augment: bool = False, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Stored inputs (its own or received ones) -> model inputs, as the dataset prepares."""
        return self._dataset.prepare(raw, augment, generator)

    def batches(
        self,
        epochs: int | None = None,
        batch_size: int | None = None,
        augment: bool = True,
        drop_last: bool = False,
        extra: Samples | None = None,
    ) -> Iterator[Samples]:
        """Shuffled mini-batches for `epochs` passes, gathered on the device. `extra` (stored
        inputs, labels) are samples the client received, trained on together with its own."""
        epochs = self.train.local_epochs if epochs is None else epochs
        size = self.train.batch_size if batch_size is None else batch_size
        gen = self.rng("batches")
        if extra is None:
            n = self.num_samples

            def batch(pos: torch.Tensor) -> Samples:
                return self._dataset.train_batch(self._indices[pos], augment, gen)
        else:
            x_own, y_own = self.raw()
            x_all, y_all = torch.cat([x_own, extra[0]]), torch.cat([y_own, extra[1]])
            n = len(y_all)

            def batch(pos: torch.Tensor) -> Samples:
                return self._dataset.prepare(x_all[pos], augment, gen), y_all[pos]

        for positions in shuffled_positions(n, size, gen, self.device, epochs, drop_last):
            yield batch(positions)
