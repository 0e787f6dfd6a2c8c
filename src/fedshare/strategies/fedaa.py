"""FedAA (Chen et al., "FedAA: Using Non-sensitive Modality to Solve Non-IID Puzzles in
Federated Learning", ACM MM 2023).

One round, two exchanges with the same cohort (§3, Algorithm 4):

A. (`train` phase) each client trains E1 = `train.local_epochs` epochs from the global model
   and uploads its model and its non-sensitive items: the ids of the classes it holds
   (§3.2: the label names; here every distinct local label, int16, counted as shared bytes).
B. (server, in the `train` phase's aggregate)
   1. for each client k, `adv_per_label` inputs per shared label, optimised from N(0, σ²) noise
      with L-BFGS(-B) until k's frozen model assigns them k's labels (Eq. 4,
      `fedshare.functional.fooling`);
   2. each client's model fine-tuned on the *other* clients' examples and labels (Eq. 5: SGD,
      `finetune_epochs` epochs), then the n_k-weighted mean: F_avg (Eq. 6);
   3. a fresh identifier I_k per client (`_identifier`, re-initialised every round) trained
      with Adam to tell k's examples from the others' on F_avg's frozen features (Eq. 6).
C. (`second` phase) each client receives F_avg and, addressed to it alone, its own I_k
   (`Phase.personal`, counted per receiver), and trains `second_epochs` epochs on
   CE + λ·softplus(I_k(F(x))) (Eq. 7: gradient into F only, I_k frozen), then uploads.
D. the n_k-weighted mean of the second-pass models is the round's global model.

Adversarial examples and identifiers never leave the server except I_k to client k; both are
discarded at the end of the round. Ablations (Table 3): `identifier=false` is Non-I (phase C
runs as a plain `second_epochs` pass, λ = 0, no identifier trained or sent: equal compute);
`finetune=false` is Non-F (F_avg is the mean of the phase-A models; examples are still
synthesised for the identifier).

Choices the paper leaves open (marked "open in the paper" in the YAML): n_adv = 32 per (client,
label), σ = 1 in the normalised input space clipped to the box of valid pixels (uint8 images;
other data are unbounded), L-BFGS with maxiter 100 (`adv_solver=auto`: scipy's L-BFGS-B on a CPU
run, torch's L-BFGS with projection on a CUDA run, which keeps the examples on the device), the
fine-tune with local training's optimizer and lr (plain SGD under `train_defaults`) × 10 epochs
× batch 256, identifier 512 hidden and Adam 4e-4 β = (0.5, 0.9) (§4.1, the paper's "D"), 10
epochs, batch 256, n_k/n weights everywhere (Algorithm 4).

λ of Eq. 7 (`adv_loss_weight`) defaults to 1: Eq. 7 is L_new = L_k + L_adv, the two terms at
unit weight, with L_adv = −E_{x∼X_k}[log(1 − I_k(F_k(x)))] (an expectation: here the minibatch
mean of softplus(I_k's logit)) and the cross-entropy taken as the minibatch mean, as local
training takes it everywhere else. Taken literally, Eq. 1 writes L_k = Σ_{i≤n_k} J as a sum over
the samples while L_adv is an expectation, which would weight the identifier term 1/n_k (or
1/B per minibatch, Algorithm 3) against a mean cross-entropy; Algorithm 3 also gives the term
its own rate η3 without a value. Any other λ is a tuned value and is named as such where used
(the `weights` scale of `fedaa/table3` measures λ ∈ {0, 0.03, 0.3, 1}).

Each round's metrics log the examples' loss before/after and the share the generating model
assigns to its target (at one class per client a locally trained model already predicts it for
noise), the identifiers' balanced accuracy, and the time of each stage.
"""

import copy
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from fedshare.config.rules import (
    ANY,
    EPOCHS,
    NON_NEGATIVE,
    POSITIVE,
    SIZE,
    STEPS,
    WIDTH,
    Rule,
    ruled,
)
from fedshare.engine.aggregation import RunningMean
from fedshare.engine.batched import Batch
from fedshare.engine.client import Client
from fedshare.engine.flat import FlatState
from fedshare.engine.optim import learning_rate, make_optimizer
from fedshare.engine.rng import derive_seed, torch_generator
from fedshare.engine.training import fit, shuffled_positions
from fedshare.functional.fooling import SOLVERS, Box, fool
from fedshare.models.base import BlockModel, as_block_model, feature_width, require_body
from fedshare.strategies._identifier import ClientIdentifier, train_identifier
from fedshare.strategies._local import cross_entropy_loss, train_local, train_stacked
from fedshare.strategies.base import (
    ClientSetup,
    Message,
    Phase,
    SetupContext,
    Update,
    register_strategy,
    sent_weights,
)
from fedshare.strategies.fedavg import FedAvg

LABELS = "labels"
IDENTIFIER = "identifier"


@dataclass
class _Uploads:
    """What phase A's cohort uploaded, in arrival order."""

    clients: list[int] = field(default_factory=list)
    sizes: list[float] = field(default_factory=list)
    weights: list[torch.Tensor] = field(default_factory=list)
    labels: list[torch.Tensor] = field(default_factory=list)


@register_strategy("fedaa")
@dataclass
class FedAA(FedAvg):
    """Local training, server-side adversarial fine-tuning and per-client identifiers, then a
    second local pass against the client's own identifier (module docstring)."""

    train_defaults: ClassVar[Mapping[str, Any]] = {
        "optimizer": "sgd",  # Section 4.1: plain SGD; lr 0.0025, batch 256, E1 = 10 in the presets
        "momentum": 0.0,
        "weight_decay": 0.0,
    }

    second_epochs: int = ruled(
        1,
        replace(EPOCHS, low=1),
        source="paper: FedAA §4.1, 'the number of the second local epochs to be 1'",
    )
    adv_per_label: int = ruled(
        32,
        Rule(low=1, high=10_000),
        source="rule: the paper leaves the examples per (client, label) open; 32 (fedshare's "
        "choice)",
    )
    adv_init_std: float = ruled(
        1.0,
        POSITIVE,
        source="rule: Eq. 4 draws the start from N(0, σ²) without σ; 1, unit variance in the "
        "normalised input space",
    )
    adv_solver: str = ruled(
        "auto",
        Rule(choices=("auto", *SOLVERS)),
        source="rule: engineering only (scipy L-BFGS-B on CPU, the paper's citation; torch L-BFGS "
        "on the device)",
    )
    adv_max_iter: int = ruled(
        100,
        replace(STEPS, low=1),
        source="rule: the paper cites L-BFGS without an iteration cap; 100 (fedshare's choice)",
    )
    finetune: bool = ruled(
        True, ANY, source="paper: FedAA §3.3, Eq. 5 (false is §4.2 Table 3's Non-F)"
    )
    finetune_epochs: int = ruled(
        10,
        EPOCHS,
        source="rule: Eq. 5 gives no epoch count; E1 = 10, the local pass's (FedAA §4.1)",
    )
    finetune_lr: float | None = ruled(
        None,
        replace(POSITIVE, optional=True),
        source="rule: Eq. 5 gives no rate; local training's optimizer and lr",
    )
    finetune_batch_size: int = ruled(
        256, SIZE, source="paper: FedAA §4.1, batch 256 (stated for updating F and T)"
    )
    identifier: bool = ruled(
        True,
        ANY,
        source="paper: FedAA §3.4-3.5, Eqs. 6-7 (false is §4.2 Table 3's Non-I)",
    )
    identifier_hidden: int = ruled(
        512,
        WIDTH,
        source="paper: FedAA §4.1, three fully connected layers of 512",
    )
    identifier_epochs: int = ruled(
        10,
        EPOCHS,
        source="rule: Eq. 6 gives no epoch count; E1 = 10, the local pass's (FedAA §4.1)",
    )
    identifier_batch_size: int = ruled(
        256,
        SIZE,
        source="paper: FedAA §4.1, batch 256 (stated for F and T; Algorithm 2 reuses B)",
    )
    identifier_lr: float = ruled(
        4e-4,
        POSITIVE,
        source="paper: FedAA §4.1, the identifier's Adam at 4e-4",
    )
    identifier_betas: list[float] = ruled(
        rule=Rule(low=0, high=1, high_open=True, length=2),
        default_factory=lambda: [0.5, 0.9],
        source="paper: FedAA §4.1, the identifier's Adam (the GAN discriminator's β = (0.5, 0.9))",
    )
    adv_loss_weight: float = ruled(
        1.0,
        NON_NEGATIVE,
        source="paper: FedAA Eq. 7, L_new = L_k + L_adv at unit weights; read with both terms as "
        "per-sample means (Eq. 1's L_k is a sum, L_adv a mean; Algorithm 3 gives L_adv its own "
        "rate η3, no value)",
    )

    # ------------------------------------------------------------------ both sides
    def _identifier_module(
        self, model: nn.Module, input_shape: tuple[int, ...]
    ) -> ClientIdentifier:
        require_body(model, "fedaa")
        return ClientIdentifier(feature_width(model, input_shape), self.identifier_hidden)

    def setup(self, ctx: SetupContext) -> None:
        super().setup(ctx)
        dataset = ctx.data.dataset
        self.input_shape = dataset.input_shape
        self.box = input_box(dataset, ctx.device)
        self.solver = self.adv_solver
        if self.solver == "auto":
            self.solver = "torch" if ctx.device.type == "cuda" else "lbfgsb"
        self.scratch = copy.deepcopy(ctx.model)
        template = self._identifier_module(ctx.model, self.input_shape)
        self.identifier_flat = FlatState(template)
        self.num_train = sum(ctx.data.client_sizes)
        self.shared_items: set[tuple[int, int]] = set()
        self.identifiers: dict[int, torch.Tensor] = {}

    def client_setup(self, ctx: ClientSetup) -> None:
        """The worker and a frozen identifier whose weights come in the personal message."""
        super().client_setup(ctx)
        module = self._identifier_module(ctx.model, tuple(ctx.input_shape))
        self.client_identifier = module.to(ctx.device).requires_grad_(False).eval()
        self.identifier_flat = FlatState(self.client_identifier)

    def phases(self) -> list[Phase]:
        second = Phase(
            "second",
            self.broadcast,
            self.second_pass,
            self.aggregate,
            personal=self.identifier_message if self.identifier else None,
            batched_step=self.second_pass_batched,
        )
        train = Phase(
            "train",
            self.broadcast,
            self.client_update,
            self.server_step,
            batched_step=self.batched_step(),
        )
        return [train, second]

    # ------------------------------------------------------------------ phase A
    def client_update(self, client: Client, message: Message) -> Update:
        update = self.trained_update(client, self.load_weights(client.model, message.weights))
        return with_label_set(client, update)

    def batched_update(self, clients: list[Client], message: Message) -> list[Update]:
        """The same local training for several clients at once, each with its label set."""
        model = self.load_weights(clients[0].model, message.weights)
        updates = train_stacked(self.flat, clients, model)
        return [with_label_set(c, u) for c, u in zip(clients, updates, strict=True)]

    def server_step(self, updates: Iterable[Update], round_idx: int) -> None:
        """Phase B: synthesis, fine-tunes, the first aggregation, the identifiers."""
        start = self._clock()
        uploads = _Uploads()
        for update in updates:
            uploads.clients.append(update.client_id)
            uploads.sizes.append(update.aggregation_weight)
            uploads.weights.append(sent_weights(update))
            uploads.labels.append(update.payload[LABELS].long())
            self.shared_items.update(
                (update.client_id, int(c)) for c in update.payload[LABELS].tolist()
            )
        times = {"time_local_s": self._clock() - start}
        metrics: dict[str, float] = {}
        examples: list[tuple[torch.Tensor, torch.Tensor]] = []
        if self.finetune or self.identifier:
            self.server_stage("synthesis")
            examples, fooled = self._synthesise(uploads, round_idx)
            metrics.update(fooled)
        times["time_synthesis_s"] = self._clock() - start - sum(times.values())
        mean = RunningMean()
        if self.finetune:
            self.server_stage("fine-tuning")
        for i, (weights, size) in enumerate(zip(uploads.weights, uploads.sizes, strict=True)):
            if self.finetune:
                weights = self._finetuned(weights, examples, i, uploads.clients[i], round_idx)
            mean.add(weights, size)
        self.load_weights(self.model, mean.value())
        times["time_finetune_s"] = self._clock() - start - sum(times.values())
        self.identifiers = {}
        if self.identifier:
            self.server_stage("identifiers")
            metrics.update(self._train_identifiers(uploads.clients, examples, round_idx))
        times["time_identifier_s"] = self._clock() - start - sum(times.values())
        self.round_metrics = {**metrics, **times}

    def _synthesise(
        self, uploads: _Uploads, round_idx: int
    ) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], dict[str, float]]:
        """x_adv^k for every client of the cohort (Eq. 4), from its own phase-A model."""
        examples, stats = [], []
        for cid, weights, labels in zip(
            uploads.clients, uploads.weights, uploads.labels, strict=True
        ):
            model = self.load_weights(self.scratch, weights)
            targets = labels.repeat_interleave(self.adv_per_label)
            gen = torch_generator(self.config.seed, "fedaa/noise", round_idx, cid, device="cpu")
            result = fool(
                model,
                targets,
                self.input_shape,
                gen,
                self.adv_init_std,
                self.box,
                self.solver,
                self.adv_max_iter,
            )
            examples.append((result.x, targets))
            stats.append((result.loss_start, result.loss_end, result.hit_rate))
        start, end, hits = (sum(s) / len(stats) for s in zip(*stats, strict=True))
        return examples, {"adv_loss_start": start, "adv_loss_end": end, "adv_hit_rate": hits}

    def _finetuned(
        self,
        weights: torch.Tensor,
        examples: list[tuple[torch.Tensor, torch.Tensor]],
        own: int,
        cid: int,
        round_idx: int,
    ) -> torch.Tensor:
        """Client `own`'s phase-A model fine-tuned on the other clients' examples (Eq. 5)."""
        others = [pair for i, pair in enumerate(examples) if i != own]
        if not others or self.finetune_epochs == 0:
            return weights
        x = torch.cat([x for x, _ in others])
        y = torch.cat([y for _, y in others])
        model = self.load_weights(self.scratch, weights)
        model.train()
        train = self.config.train
        lr = learning_rate(train, round_idx) if self.finetune_lr is None else self.finetune_lr
        optimizer = make_optimizer(model.parameters(), train, lr)
        gen = torch_generator(
            self.config.seed, "fedaa/finetune", round_idx, cid, device=self.device
        )
        batches = shuffled_positions(
            len(y), self.finetune_batch_size, gen, self.device, self.finetune_epochs
        )
        fit(optimizer, batches, lambda pos: F.cross_entropy(model(x[pos]), y[pos]))
        return self.flat.flatten(model)

    def _train_identifiers(
        self, clients: list[int], examples: list[tuple[torch.Tensor, torch.Tensor]], round_idx: int
    ) -> dict[str, float]:
        """A fresh I_k per client on F_avg's frozen features of all examples (Eq. 6)."""
        model = as_block_model(self.model)
        model.eval()
        with torch.no_grad():
            features = torch.cat([model.features(x).flatten(1) for x, _ in examples])
        model.train()
        owner = torch.cat(
            [torch.full((len(y),), i, device=self.device) for i, (_, y) in enumerate(examples)]
        )
        stats = []
        for i, cid in enumerate(clients):
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(derive_seed(self.config.seed, "fedaa/identifier", round_idx, cid))
                identifier = self._identifier_module(self.model, self.input_shape)
            identifier = identifier.to(self.device)
            gen = torch_generator(
                self.config.seed, "fedaa/identifier_batches", round_idx, cid, device=self.device
            )
            stats.append(
                train_identifier(
                    identifier,
                    features,
                    owner == i,
                    self.identifier_epochs,
                    self.identifier_batch_size,
                    self.identifier_lr,
                    (self.identifier_betas[0], self.identifier_betas[1]),
                    gen,
                )
            )
            self.identifiers[cid] = self.identifier_flat.flatten(identifier).detach()
        start, end, balanced = (sum(s) / len(stats) for s in zip(*stats, strict=True))
        return {
            "identifier_loss_start": start,
            "identifier_loss_end": end,
            "identifier_balanced_accuracy": balanced,
        }

    # ------------------------------------------------------------------ phase C
    def identifier_message(self, round_idx: int, client_id: int) -> Message:
        """Client k's own identifier, for it alone."""
        return Message(payload={IDENTIFIER: self.identifiers[client_id]})

    def second_pass(self, client: Client, message: Message) -> Update:
        """E2 epochs of CE + λ·softplus(I_k(F(x))) (Eq. 7); plain CE without an identifier."""
        model = self.load_weights(client.model, message.weights)
        identifier = self.identifier_of(client)
        loss_fn = cross_entropy_loss
        if identifier is not None:
            loss_fn = partial(self.adversarial_loss, identifier=identifier, weight=1.0)
        loss = train_local(client, model, loss_fn, epochs=self.second_epochs)
        return Update(
            client.id,
            client.num_samples,
            weights=self.flat.flatten(model),
            metrics={"second_pass_loss": loss},
        )

    def second_pass_batched(self, clients: list[Client], message: Message) -> list[Update]:
        """The second pass for several clients at once: each row's identifier and its weight
        (1, or 0 for a client without one) are its `client_inputs`."""
        model = self.load_weights(clients[0].model, message.weights)
        identifiers = [self.identifier_of(client) for client in clients]
        streams: list[Iterator[Batch]] = [
            client.batches(epochs=self.second_epochs) for client in clients
        ]
        if all(i is None for i in identifiers):
            updates = train_stacked(self.flat, clients, model, streams=streams)
        else:
            zeros = torch.zeros(self.identifier_flat.numel, device=sent_weights(message).device)
            rows = torch.stack([zeros if i is None else i for i in identifiers])
            weights = torch.tensor([float(i is not None) for i in identifiers], device=rows.device)
            updates = train_stacked(
                self.flat,
                clients,
                model,
                self.adversarial_loss,
                client_inputs=(rows, weights),
                streams=streams,
            )
        for update in updates:
            update.metrics["second_pass_loss"] = update.metrics.pop("train_loss")
        return updates

    def identifier_of(self, client: Client) -> torch.Tensor | None:
        """The flat identifier I_k this client received, or None (none sent, or λ = 0)."""
        if client.personal is None or self.adv_loss_weight <= 0:
            return None
        return client.personal.payload[IDENTIFIER]

    def adversarial_loss(
        self,
        net: BlockModel,
        x: torch.Tensor,
        y: torch.Tensor,
        identifier: torch.Tensor,
        weight: torch.Tensor | float,
    ) -> torch.Tensor:
        """Eq. 7: CE + weight·λ·softplus(I_k(F(x))), I_k given as its flat state."""
        f = net.features(x)
        logits = functional_call(self.client_identifier, self.identifier_flat.views(identifier), f)
        adversarial = F.softplus(logits).mean()
        return F.cross_entropy(net.head(f), y) + weight * self.adv_loss_weight * adversarial

    def aggregate(self, updates: Iterable[Update], round_idx: int) -> None:
        """Phase D: the n_k-weighted mean of the second-pass models; the round's identifiers
        and examples are dropped."""
        start = self._clock()
        super().aggregate(updates, round_idx)
        self.identifiers = {}
        self.round_metrics["time_second_pass_s"] = self._clock() - start

    # ------------------------------------------------------------------ reporting
    def _clock(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def summary_metrics(self) -> dict[str, Any]:
        """The non-sensitive items shared over the run, as the paper counts them (Section 1): one
        per distinct (client, label id), over the training samples (its "0.02 % / 0.2 %")."""
        items = len(self.shared_items)
        return {"shared_items": items, "shared_item_percent": 100.0 * items / self.num_train}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "shared_items": sorted(self.shared_items)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.shared_items = {(int(c), int(y)) for c, y in state.get("shared_items", [])}


def with_label_set(client: Client, update: Update) -> Update:
    """Add the client's label set (the classes it holds) to its upload."""
    update.payload[LABELS] = torch.unique(client.labels).to(torch.int16)
    return update


def input_box(dataset: Any, device: torch.device) -> Box:
    """The model-input image of the valid stored range: [0, 255] for uint8 images, else the
    stored training inputs' overall [min, max] (e.g. [0, 16] for digits), scaled and normalised
    as the dataset prepares them. Eq. 4 sets no bound; bounding only images, L-BFGS drove
    digits' inputs to ~5e3 and the fine-tune on them diverged (non-finite loss)."""
    shape = (1, *dataset.input_shape)
    x = dataset.x_train
    if x.dtype == torch.uint8:
        low, high = torch.tensor(0, dtype=torch.uint8), torch.tensor(255, dtype=torch.uint8)
    else:
        low, high = x.min().cpu(), x.max().cpu()
    low = torch.full(shape, low.item(), dtype=x.dtype, device=device)
    high = torch.full(shape, high.item(), dtype=x.dtype, device=device)
    return Box(dataset.prepare(low), dataset.prepare(high))
