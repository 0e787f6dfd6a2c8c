"""FLea (Xia et al., KDD 2024): federated learning with a global buffer of shared activations.

The paper's Section 3 (Algorithm 1, Eqs. 2–6; App. B, Eqs. 7–11) and the official code where
they differ.

A round has two exchanges with the same cohort (`phases()`):

1. **train**: the server sends θ^(t) and the feature buffer F^(t) (activations at block l and
   their labels, empty in round 0). Each client mixes its local activations with buffer
   activations (β ~ Beta(a, a) per sample, soft labels, Eq. 2) and minimises (Eq. 6, code)
   local_ce·CE(θ_k(x), y) + mix_ce·CE_soft(θ_k[l:](f̃), ỹ) + λ2(g)·dCor(x, θ_k[:l](x))
   + kd·KL(θ^(t)[l:](f^F) ‖ θ_k[l:](f^F)) with the teacher θ^(t) frozen (no gradient to it or
   through it, also for `kd_input=mixed`); the server averages the weights (FedAvg, BN
   statistics included). l is `split_layer`, else the model's `flea_layer` (an early block);
   the penultimate split is refused unless `allow_penultimate_split=true`.
2. **share**: the server sends θ^(t+1) back to the same clients; each extracts activations of
   its fixed α-subset S_k at block l (no gradient, BN in eval mode) and uploads them with their
   labels; they replace the buffer (only the last round's clients, Section 3.2).

Round 0 is the code's warm-up (not in the paper): `warmup_epoch_multiplier`·E epochs of
CE + 0.5·KL(θ^(1)(x) ‖ θ_k(x)) + 3·dCor. λ2 follows the code's schedule max(3 − 0.1·g, 1)
(`dcor_schedule=constant` for the paper's constant λ2).

Paper forms behind flags: `local_ce_weight=0`, `kd_input=mixed`,
`kd_direction=student_to_teacher`, `dcor_variant=paper`, `dcor_schedule=constant`,
`warmup=false`. Deviations from the code (all documented in docs/flea.md): S_k is drawn
without replacement (`share_with_replacement=true` for the code); a local epoch is one pass over
D_k (the code draws ⌊|D_k|/b⌋ + 1 batches from an iterator that persists across rounds); the
logged `train_dcor` is the mean over all local steps (the code logs the last epoch's); the
running best accuracy includes the warm-up round's model.
"""

import copy
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from fedshare.engine.batched import Batch, StackedLoss
from fedshare.engine.client import Client
from fedshare.engine.rng import numpy_rng
from fedshare.engine.training import shuffled_positions
from fedshare.errors import FedshareError, choices_message
from fedshare.functional.losses import distillation_kl, soft_cross_entropy
from fedshare.functional.mixup import beta_weights, mix_labels, mix_pair
from fedshare.models.base import BlockModel, as_block_model, require_body
from fedshare.privacy.dcor import distance_correlation, mean_distance_correlation
from fedshare.privacy.exposure import ExposureTracker
from fedshare.strategies._flea_params import DCOR_SCHEDULES, FLeaParameters
from fedshare.strategies._local import train_local, train_stacked
from fedshare.strategies._sharing import fixed_subset
from fedshare.strategies.base import (
    ClientSetup,
    Message,
    Phase,
    SetupContext,
    Strategy,
    Update,
    register_strategy,
)


def dcor_weight_at(
    round_idx: int, weight: float, schedule: str, decay: float, floor: float
) -> float:
    """λ2 at round g (0-based): `linear` max(w − decay·g, min(floor, w)); `constant` w.

    The code's schedule (3, 0.1, 1) gives 2.9 at g = 1, 1.1 at g = 19 and 1 from g = 20.
    """
    if schedule == "constant":
        return weight
    if schedule == "linear":
        return max(weight - decay * round_idx, min(floor, weight))
    raise FedshareError(choices_message("strategy.dcor_schedule", schedule, list(DCOR_SCHEDULES)))


@register_strategy("flea")
@dataclass
class FLea(FLeaParameters, Strategy):
    """Feature sharing through a global buffer rebuilt every round (Section 3); its parameters
    and their sources are `FLeaParameters`."""

    train_defaults: ClassVar[Mapping[str, Any]] = {
        "optimizer": "adam",
        "lr": 1e-3,
        "momentum": 0.0,
        "optimizer_reset_each_step": True,  # the code builds a new Adam every step
        "lr_schedule": "linear",  # 1e-3·(1 − 0.018·g), then 1e-4 from g = 50 (the code)
        "lr_decay": 0.018,
        "lr_floor": 1e-4,
    }

    # ------------------------------------------------------------------ setup
    def setup(self, ctx: SetupContext) -> None:
        super().setup(ctx)
        model = ctx.model
        if not hasattr(model, "encode") or not hasattr(model, "num_blocks"):
            raise FedshareError(
                f"strategy 'flea' needs a block model with split points; got {type(model).__name__}"
            )
        self.split = self.resolve_split(model)
        self.num_classes = ctx.data.dataset.num_classes
        self.exposure = ExposureTracker(ctx.data.client_sizes)
        self.buffer: dict[str, torch.Tensor] = {}
        self.buffer_owners: list[int] = []
        self.shared_dcor_history: list[float] = []
        self._positions: dict[int, torch.Tensor] = {}

    def client_setup(self, ctx: ClientSetup) -> None:
        """A client knows the split from the architecture; its frozen teacher θ^(t) is a
        scratch copy of the model, loaded from each round's broadcast."""
        super().client_setup(ctx)
        self.split = self.resolve_split(ctx.model)
        self.teacher = copy.deepcopy(as_block_model(ctx.model)).requires_grad_(False)

    def resolve_split(self, model: nn.Module) -> int:
        """l: `split_layer`, else the model's `flea_layer`; the head's input only if allowed."""
        model = require_body(model, self.name)
        names = ", ".join(model.block_names)
        split = getattr(model, "flea_layer", None) if self.split_layer is None else self.split_layer
        if split is None:
            raise FedshareError(
                f"model {type(model).__name__} (blocks: {names}) has no FLea split "
                f"(flea_layer); set strategy.split_layer"
            )
        if not 0 <= split < model.num_blocks:
            raise FedshareError(
                f"strategy.split_layer={split} is not a split point of this model; valid: "
                f"0..{model.num_blocks - 1} (blocks: {names})"
            )
        if split == model.num_blocks - 1 and not self.allow_penultimate_split:
            raise FedshareError(
                f"FLea split {split} is the penultimate split of this model (the input of its "
                f"head; blocks: {names}), where λ2·dCor (λ2 tuned for the paper's early "
                f"layers) collapses accuracy; use an earlier strategy.split_layer or set "
                f"strategy.allow_penultimate_split=true"
            )
        return split

    def phases(self) -> list[Phase]:
        train = self.train_phase()
        if not self.share_features:
            return [train]
        share = Phase("share", self.broadcast_model, self.extract, self.collect, trains=False)
        return [train, share]

    # ------------------------------------------------------------------ helpers
    def positions(self, seed: int, client_id: int, n: int) -> torch.Tensor:
        """S_k: fixed positions into client k's data, the same every round (Section 3.2)."""
        return fixed_subset(
            seed,
            "flea/share",
            client_id,
            n,
            self.share_fraction,
            self.share_with_replacement,
            self.share_min_samples,
        )

    def share_positions(self, client_id: int) -> torch.Tensor:
        """S_k as the server's exposure record sees it (cached)."""
        if client_id not in self._positions:
            n = self.data.client_sizes[client_id]
            self._positions[client_id] = self.positions(self.config.seed, client_id, n)
        return self._positions[client_id]

    def dcor_weight_at(self, round_idx: int) -> float:
        if round_idx == 0 and self.warmup:
            return self.warmup_dcor_weight
        return dcor_weight_at(
            round_idx, self.dcor_weight, self.dcor_schedule, self.dcor_decay, self.dcor_floor
        )

    @property
    def buffer_size(self) -> int:
        features = self.buffer.get("features")
        return 0 if features is None else int(features.shape[0])

    # ------------------------------------------------------------------ phase 1: train
    def broadcast(self, round_idx: int) -> Message:
        return Message(weights=self.flat.flatten(self.model), payload=dict(self.buffer))

    def client_update(self, client: Client, message: Message) -> Update:
        model = self.load_weights(client.model, message.weights)
        teacher = self.load_weights(self.teacher, message.weights).eval()
        step_loss = self._step_loss(client.round, teacher)
        dcor_sum = torch.zeros((), device=client.device)
        dcor_count = torch.zeros((), device=client.device)

        def loss_fn(net: nn.Module, *batch: torch.Tensor) -> torch.Tensor:
            nonlocal dcor_sum, dcor_count
            loss, (dcor, counted) = step_loss(net, *batch)
            dcor_sum, dcor_count = dcor_sum + dcor.detach(), dcor_count + counted
            return loss

        loss = train_local(client, model, loss_fn, batches=self._batches(client, message))
        return Update(
            client.id,
            client.num_samples,
            weights=self.flat.flatten(model),
            metrics={"train_loss": loss, "train_dcor": dcor_sum / dcor_count.clamp_min(1)},
        )

    def batched_update(self, clients: list[Client], message: Message) -> list[Update]:
        """`client_update` for several clients (`train.batched`): the buffer batches and Beta
        draws come from each client's own streams outside the vectorised step; the local
        activations, their mix-up, dCor and the frozen teacher's logits run inside it."""
        model = self.load_weights(clients[0].model, message.weights)
        teacher = self.load_weights(self.teacher, message.weights).eval()
        return train_stacked(
            self.flat,
            clients,
            model,
            self._step_loss(clients[0].round, teacher),
            streams=[self._batches(client, message) for client in clients],
            aux_metrics=lambda aux: {"train_dcor": aux[0] / aux[1].clamp_min(1)},
        )

    def _batches(self, client: Client, message: Message) -> Iterator[Batch]:
        """The client's local batches (×`warmup_epoch_multiplier` epochs in the warm-up round),
        each with, when it mixes with the received buffer, the next buffer batch cut to the
        same length and its Beta weights: (x, y[, f_buf, y_buf, β])."""
        features = message.payload.get("features")
        labels = message.payload.get("labels")
        warm = client.round == 0 and self.warmup
        epochs = client.train.local_epochs * (self.warmup_epoch_multiplier if warm else 1)
        if warm or features is None or labels is None or features.shape[0] == 0:
            yield from client.batches(epochs=epochs)
            return
        takes = shuffled_positions(  # endless
            features.shape[0], client.train.batch_size, client.rng("buffer"), client.device
        )
        rng = numpy_rng(client.seed, f"{client.phase}/mixup", client.round, client.id)
        for x, y in client.batches(epochs=epochs):
            take = next(takes)
            n = min(x.shape[0], take.shape[0])
            beta = beta_weights(n, self.beta_a, rng, self.beta_per_sample, x.device)
            yield x, y, features[take[:n]], labels[take[:n]], beta

    def _step_loss(self, round_idx: int, teacher: BlockModel) -> StackedLoss:
        """The loss of one local step, (net, *batch) -> (loss, (dCor, counted)): the warm-up
        loss, plain CE, or the mix-up loss for a batch with buffer activations; plus λ2·dCor of
        the batch's inputs and activations (Eq. 5; a batch of one sample has none). Fixed
        shapes, so it also runs under `vmap`."""
        warm = round_idx == 0 and self.warmup
        lam2 = self.dcor_weight_at(round_idx)  # the warm-up weight in round 0

        def step_loss(net: BlockModel, x: torch.Tensor, y: torch.Tensor, *buffer: torch.Tensor):
            f = net.encode(x, self.split)
            counted = x.shape[0] > 1
            if counted:
                with torch.set_grad_enabled(bool(lam2)):
                    # a str field (the config's type), checked against VARIANTS in `_check`
                    dcor = distance_correlation(x, f, self.dcor_variant)  # type: ignore[arg-type]
            else:
                dcor = torch.zeros((), device=x.device)
            if warm:
                loss = self._warmup_loss(net, teacher, x, y, f)
            elif not buffer:
                loss = F.cross_entropy(net.decode(f, self.split), y)
            else:
                loss = self._mixed_loss(net, teacher, y, f, *buffer)
            loss = loss + lam2 * dcor if lam2 else loss
            weight = torch.ones_like if counted else torch.zeros_like  # no host-to-device copy
            return loss, torch.stack([dcor.detach(), weight(dcor.detach())])

        return step_loss

    def _warmup_loss(
        self,
        model: BlockModel,
        teacher: BlockModel,
        x: torch.Tensor,
        y: torch.Tensor,
        f: torch.Tensor,
    ) -> torch.Tensor:
        """Round 0 of the code: CE + warmup_kd·KL(θ^(1)(x) ‖ θ_k(x)) on raw local data."""
        logits = model.decode(f, self.split)
        loss = F.cross_entropy(logits, y)
        if self.warmup_kd_weight:
            with torch.no_grad():
                target = teacher(x)
            kd = distillation_kl(logits, target, self.kd_temperature, self.kd_direction)
            loss = loss + self.warmup_kd_weight * kd
        return loss

    def _mixed_loss(
        self,
        model: BlockModel,
        teacher: BlockModel,
        y: torch.Tensor,
        f: torch.Tensor,
        f_buf: torch.Tensor,
        y_buf: torch.Tensor,
        beta: torch.Tensor,
    ) -> torch.Tensor:
        """Eq. 2 mix-up of local and buffer activations (the buffer batch already cut to n =
        min of the two lengths, with its Beta weights); soft-label CE, local CE and KD."""
        n = f_buf.shape[0]
        f_mix = mix_pair(f[:n], f_buf, beta)
        y_mix = mix_labels(y[:n], y_buf, beta, self.num_classes)
        z_mix = model.decode(f_mix, self.split)
        loss = self.mix_ce_weight * soft_cross_entropy(z_mix, y_mix)
        if self.local_ce_weight:
            loss = loss + self.local_ce_weight * F.cross_entropy(model.decode(f, self.split), y)
        if self.kd_weight:
            kd_in = f_buf if self.kd_input == "buffer" else f_mix
            student = model.decode(f_buf, self.split) if self.kd_input == "buffer" else z_mix
            target = self._teacher_logits(teacher, kd_in)
            kd = distillation_kl(student, target, self.kd_temperature, self.kd_direction)
            loss = loss + self.kd_weight * kd
        return loss

    def _teacher_logits(self, teacher: BlockModel, f: torch.Tensor) -> torch.Tensor:
        """The frozen teacher θ^(t)[l:](f) (Eq. 4): no gradient to θ^(t) nor through it to f."""
        with torch.no_grad():
            return teacher.decode(f.detach(), self.split)

    def aggregate(self, updates: Iterable[Update], round_idx: int) -> None:
        received: list[Update] = []
        self.load_weights(self.model, self.average_weights(updates, collect=received))
        if self.buffer_size:
            self.exposure.record_delivery(self.buffer_owners, [u.client_id for u in received])
        self.round_metrics = {
            "buffer_size": self.buffer_size,
            "dcor_weight": self.dcor_weight_at(round_idx),
            **self.exposure.metrics(),
        }

    # ------------------------------------------------------------------ phase 2: share
    def broadcast_model(self, round_idx: int) -> Message:
        return Message(weights=self.flat.flatten(self.model))

    def _extract(self, model: BlockModel, x: torch.Tensor) -> torch.Tensor:
        model.train(self.extract_bn_mode == "train")
        with torch.no_grad():
            return model.encode(x, self.split)

    def extract(self, client: Client, message: Message) -> Update:
        """F_k^(t+1): activations of S_k under the new global model, with their labels."""
        positions = self.positions(client.seed, client.id, client.num_samples)
        positions = positions.to(client.device)
        if positions.numel() == 0:
            return Update(client.id, client.num_samples)
        model = self.load_weights(as_block_model(client.model), message.weights)
        x, y = client.data(positions)
        return Update(
            client.id,
            client.num_samples,
            payload={"features": self._extract(model, x), "labels": y},
        )

    def collect(self, updates: Iterable[Update], round_idx: int) -> None:
        """The new buffer: only this round's uploads (the old buffer is discarded)."""
        features, labels, owners, sources = [], [], [], []
        for update in updates:
            if not update.payload:
                continue
            positions = self.share_positions(update.client_id)
            self.exposure.record_shared(update.client_id, positions)
            features.append(update.payload["features"])
            labels.append(update.payload["labels"])
            owners.append(update.client_id)
            idx = self.data.client_indices[update.client_id][positions.to(self.device)]
            sources.append(self.data.dataset.train_batch(idx)[0])
        self.buffer = (
            {"features": torch.cat(features), "labels": torch.cat(labels)} if features else {}
        )
        self.buffer_owners = owners
        self.round_metrics.update(shared_items=self.buffer_size, **self.exposure.metrics())
        if features:
            value = mean_distance_correlation(
                torch.cat(sources), self.buffer["features"], self.metric_chunk
            )
            if value is not None:
                self.shared_dcor_history.append(value)
                self.round_metrics["shared_dcor"] = value

    # ------------------------------------------------------------------ results, checkpoint
    def context_view(self) -> dict[str, Any]:
        """Single-input activations at l of the final global model (the paper uses snapshots
        during training, at c = 0.65 and 0.40)."""
        return {"view": "features", "model": self.global_model(), "split": self.split}

    def summary_metrics(self) -> dict[str, Any]:
        history = self.shared_dcor_history
        return {
            **self.exposure.metrics(),
            "exposure_data_per_client": [round(v, 4) for v in self.exposure.data_fractions()],
            "shared_dcor": history[-1] if history else None,
            "shared_dcor_mean": sum(history) / len(history) if history else None,
            "split_layer": self.split,
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "buffer": dict(self.buffer),
            "buffer_owners": list(self.buffer_owners),
            "exposure": self.exposure.state_dict(),
            "shared_dcor_history": list(self.shared_dcor_history),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.buffer = {k: v.to(self.device) for k, v in state["buffer"].items()}
        self.buffer_owners = list(state["buffer_owners"])
        self.exposure.load_state_dict(state["exposure"])
        self.shared_dcor_history = list(state["shared_dcor_history"])
