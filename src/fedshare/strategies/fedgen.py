"""FedGen (Zhu et al., ICML 2021, "Data-Free Knowledge Distillation for Heterogeneous Federated
Learning", §3: §3.1 Eq. 4, §3.2 Eq. 5, Algorithm 1): a server-trained, label-conditioned
generator of latent features.

The model is w = h∘f: f the extractor (`features`), h the classifier head (`head`); the latent
space Z is the head's input. Every round the clients train as in FedAvg and upload their weights
and their label counts n_{k,y} (C integers, counted as shared bytes). The server averages the
weights and trains the generator G_w(z | y) (an MLP: onehot(y) ⊕ ε, ε ~ N(0, I), → `hidden` →
BatchNorm → ReLU → z) for `generator_steps` Adam steps against the round's heads h_k, frozen:

    min_w  E_{y ~ p̂(y), ε} [ CE( Σ_k α_{k,y} · h_k(G_w(y, ε)), y ) ]  +  η · L_div,

α_{k,y} = n_{k,y} / Σ_j n_{j,y} (each head weighted by its client's share of the label, the
weights of the authors' code, `get_label_weights`), y drawn ∝ the round's counts
Σ_k n_{k,y} (labels the round's heads know), and L_div FedGen's diversity loss
(`functional.generative`). G's weights and p̂(y) ∝ every count received so far go out with the
next broadcast (counted). The local objective (the paper's Eq. 5) adds to the client's
cross-entropy `gen_weight` · CE(h(ẑ), ŷ) on a batch of generated features, ŷ ~ p̂,
ẑ = G(ŷ, ε): the generated features enter the head alone, the extractor gets no gradient from
them.

Deviations from the authors' code (zhuangdizhu/FedGen at dd5807c; documented, not adopted:
adopting them needs the FLea/FedGen comparisons rerun):
* the generated term's weight: there generative_alpha·0.98^t (10 for MNIST) times
  gen_batch_size/batch_size (userpFedGen.py l. 51–52, 65–70; model_config.py l. 59); here
  `gen_weight` (1), constant, as the paper's Eq. 5 writes it;
* a second term there, generative_beta·0.98^t (10 for MNIST, l. 60 of model_config.py) times
  the KL between the local model's outputs on the real batch and the head's softmax on
  generated latents of the same labels (userpFedGen.py l. 53–58); none here (not in Eq. 5);
* generated labels: drawn uniformly over the labels present, on the client (userpFedGen.py
  l. 60) and on the server (serverpFedGen.py l. 131); here ∝ the label counts (the p̂(y) of the
  paper's objective);
* the generator's Adam has weight decay 1e-2 and an ExponentialLR of 0.98 per round
  (serverpFedGen.py l. 42–47, 182); here no weight decay and a constant lr;
* the noise: `torch.rand`, uniform on [0, 1), though commented "Gaussian" (generator.py l. 63);
  here ε ~ N(0, I);
* the server objective: there the count-weighted sum of each head's cross-entropy,
  Σ_k mean(α_{k,y}·CE(h_k(G(y, ε)), y)) (serverpFedGen.py l. 143–154); here the cross-entropy of
  the count-weighted sum of the heads' logits (the ensemble's prediction).
Round 0 is plain FedAvg (no generator has been trained yet).

Clients with their own architectures (`clients.models`, every one with the shared latent
width): the generator needs only the heads, so only the heads travel, as the paper's
flexible parameter sharing has it (§3.3: the predictor shared, the feature extractor kept
local). Each client keeps its whole model in its state (`_personal`), puts the received global
head on it, trains with Eq. 5 and uploads its head with its label counts; the server averages
the heads (sample-weighted) into the next global head and trains G against the uploaded ones
as above. A client's model is evaluated with the latest global head.
"""

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from fedshare.config.rules import NON_NEGATIVE, SIZE, STEPS, WIDTH, ruled
from fedshare.engine.aggregation import RunningMean
from fedshare.engine.batched import Batch
from fedshare.engine.client import Client
from fedshare.engine.flat import FlatState
from fedshare.engine.rng import seed_global_torch, torch_generator
from fedshare.functional.generative import diversity_loss, ensemble_cross_entropy
from fedshare.models.base import BlockModel, as_block_model, feature_width, require_body
from fedshare.strategies._local import (
    LossFn,
    cross_entropy_loss,
    run_stacked,
    train_local,
    train_stacked,
)
from fedshare.strategies._personal import PersonalStrategy, load_personal
from fedshare.strategies._personal_heads import PersonalHeads
from fedshare.strategies._server_generator import ServerGenerator
from fedshare.strategies.base import (
    ClientSetup,
    Message,
    SetupContext,
    Update,
    register_strategy,
    sent_weights,
)
from fedshare.strategies.lg_fedavg import head_weights, load_head

GENERATOR, PRIOR, COUNTS = "generator", "label_prior", "label_counts"


class LatentGenerator(nn.Module):
    """(labels, noise) -> latent features of `dim`: onehot(y) ⊕ ε → Linear → BN → ReLU → Linear."""

    def __init__(self, num_classes: int, noise_dim: int, hidden: int, dim: int) -> None:
        super().__init__()
        self.num_classes, self.noise_dim = num_classes, noise_dim
        self.net = nn.Sequential(
            nn.Linear(num_classes + noise_dim, hidden),
            nn.BatchNorm1d(hidden),
            nn.ReLU(),
            nn.Linear(hidden, dim),
        )

    def forward(self, y: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([F.one_hot(y, self.num_classes).to(noise.dtype), noise], 1))

    def sample(
        self, prior: torch.Tensor, n: int, gen: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """n latents with labels drawn from `prior`: (z, y, noise)."""
        y = torch.multinomial(prior, n, replacement=True, generator=gen)
        noise = torch.randn((n, self.noise_dim), generator=gen, device=prior.device)
        return self(y, noise), y, noise


def head_prefix(model: nn.Module) -> str:
    """The state-dict prefix of the model's head block."""
    return next(name for name, m in model.named_modules() if m is model.head) + "."


@register_strategy("fedgen")
@dataclass
class FedGen(ServerGenerator[LatentGenerator]):
    """FedAvg plus a latent generator trained on the clients' heads (module docstring)."""

    noise_dim: int = ruled(
        32,
        WIDTH,
        source="code: FedGen's code (zhuangdizhu/FedGen, utils/model_config.py L20: the MNIST "
        "generator's noise_dim 32)",
    )
    hidden: int = ruled(
        256,
        WIDTH,
        source="code: FedGen's code (zhuangdizhu/FedGen, utils/model_config.py L20: the MNIST "
        "generator's hidden width 256)",
    )
    generator_steps: int = ruled(
        50,
        STEPS,
        source="code: FedGen's code (zhuangdizhu/FedGen, model_config.py L53 ensemble_epochs = 50, "
        "serverpFedGen.py L97-100: 50 // 5 epochs × 5 = 50 generator steps a round)",
    )
    generator_batch: int = ruled(
        32,
        SIZE,
        source="code: FedGen's code (zhuangdizhu/FedGen, serverpFedGen.py L97-98 draws the run's "
        "batch size of labels, main.py's 32)",
    )
    diversity_weight: float = ruled(
        1.0,
        NON_NEGATIVE,
        source="code: FedGen's code (zhuangdizhu/FedGen, utils/model_config.py L57: ensemble_eta = "
        "1)",
    )
    gen_weight: float = ruled(
        1.0,
        NON_NEGATIVE,
        source="paper: FedGen §3.2 Eq. 5, the generated term at unit weight",
    )

    takes_client_models: ClassVar[bool] = True
    """With `clients.models` the clients keep their models and share heads (module doc)."""

    def _generator(
        self, model: nn.Module, num_classes: int, shape: tuple[int, ...], seed: int
    ) -> LatentGenerator:
        dim = feature_width(model, shape)
        seed_global_torch(seed, "fedgen/latent_generator")  # the same initial G on both sides
        return LatentGenerator(num_classes, self.noise_dim, self.hidden, dim)

    def setup(self, ctx: SetupContext) -> None:
        require_body(ctx.model, "fedgen")
        super().setup(ctx)
        num_classes = ctx.data.dataset.num_classes
        self.label_totals = torch.zeros(num_classes, dtype=torch.long, device=ctx.device)
        self.trained = False
        self.head_prefix = head_prefix(ctx.model)
        self.heads: PersonalHeads | None = None
        if ctx.client_models is not None:
            self.heads = PersonalHeads()
            self.heads.setup(ctx)

    def client_setup(self, ctx: ClientSetup) -> None:
        super().client_setup(ctx)
        self.seed = ctx.seed

    # ------------------------------------------------------------------ client side
    def broadcast(self, round_idx: int) -> Message:
        if self.heads is None:
            message = super().broadcast(round_idx)
        else:
            message = Message(weights=self.heads.head)
        if self.trained:
            message.payload[GENERATOR] = self.gen_flat.flatten(self.generator)
            message.payload[PRIOR] = self.label_prior()
        return message

    def heads_only(self, message: Message) -> bool:
        """Whether the broadcast carries the global head alone (clients of their own
        architectures) rather than the whole global model."""
        return sent_weights(message).numel() != self.flat.numel

    def client_update(self, client: Client, message: Message) -> Update:
        if self.heads_only(message):
            model, loss_fn, batches = self.head_step(client, message)
            loss = train_local(client, model, loss_fn, batches=batches)
            return self.head_upload(client, model, loss)
        model = self.load_weights(client.model, message.weights)
        if GENERATOR not in message.payload:
            update = self.trained_update(client, model)
        else:
            batches = self.generated_batches(client, message)
            update = self.trained_update(client, model, self.generated_loss, batches=batches)
        return self.with_counts(update, client)

    def batched_update(self, clients: list[Client], message: Message) -> list[Update]:
        """The same step for several clients at once, each drawing from its own stream."""
        if self.heads_only(message):
            return self.batched_head_update(clients, message)
        model = self.load_weights(clients[0].model, message.weights)
        if GENERATOR not in message.payload:
            updates = train_stacked(self.flat, clients, model)
        else:
            streams = [self.generated_batches(client, message) for client in clients]
            updates = train_stacked(self.flat, clients, model, self.generated_loss, streams=streams)
        return [self.with_counts(u, c) for u, c in zip(updates, clients, strict=True)]

    def head_step(
        self, client: Client, message: Message
    ) -> tuple[nn.Module, LossFn, Iterator[Batch] | None]:
        """A client of its own architecture: its personal model under the received head, the
        loss and its batches (Eq. 5 on generated latents once G is trained)."""
        model = load_head(load_personal(client, client.model, self.seed), sent_weights(message))
        if GENERATOR not in message.payload:
            return model, cross_entropy_loss, None
        return model, self.generated_loss, self.generated_batches(client, message)

    def head_upload(self, client: Client, model: nn.Module, loss: torch.Tensor) -> Update:
        """The trained head and the label counts go up; the whole model stays with the client."""
        update = Update(
            client.id, client.num_samples, weights=head_weights(model), metrics={"train_loss": loss}
        )
        return self.with_counts(PersonalStrategy.keep(client, model, update), client)

    def batched_head_update(self, clients: list[Client], message: Message) -> list[Update]:
        """`head_step` for clients of one architecture at once, stacked from their own models."""
        starts, streams = [], []
        for client in clients:  # the models share the architecture's worker: copy each
            model, loss_fn, batches = self.head_step(client, message)
            starts.append(FlatState(model).flatten(model).clone())
            streams.append(client.batches() if batches is None else batches)
        run, losses = run_stacked(clients, model, loss_fn, streams=streams, starts=starts)
        return [self.head_upload(c, run.load_client(i), losses[i]) for i, c in enumerate(clients)]

    def with_counts(self, update: Update, client: Client) -> Update:
        """The client's label counts n_{k,y} travel with its weights."""
        counts = torch.bincount(client.labels, minlength=self.num_classes)
        update.payload[COUNTS] = counts.to(torch.int32)
        return update

    def generated_batches(self, client: Client, message: Message) -> Iterator[Batch]:
        """(x, y, ẑ, ŷ): each local batch with as many generated latents, ŷ ~ the received p̂."""
        self.gen_flat.load_(self.generator, message.payload[GENERATOR])
        generator = self.generator.eval()
        prior = message.payload[PRIOR].to(client.device)
        draws = client.rng("generator")
        for x, y in client.batches():
            with torch.no_grad():
                z, y_gen, _ = generator.sample(prior, len(x), draws)
            yield x, y, z, y_gen

    def generated_loss(
        self,
        net: BlockModel,
        x: torch.Tensor,
        y: torch.Tensor,
        z: torch.Tensor,
        y_gen: torch.Tensor,
    ) -> torch.Tensor:
        """The paper's Eq. 5: CE on the local batch + gen_weight · CE(h(ẑ), ŷ), head only."""
        loss = F.cross_entropy(net(x), y)
        return loss + self.gen_weight * F.cross_entropy(net.head(z), y_gen)

    # ------------------------------------------------------------------ server side
    def label_prior(self) -> torch.Tensor:
        """p̂(y) ∝ the label counts received so far."""
        totals = self.label_totals.to(torch.float32)
        return totals / totals.sum()

    def aggregate(self, updates: Iterable[Update], round_idx: int) -> None:
        mean = RunningMean()
        heads: list[dict[str, torch.Tensor]] = []
        counts: list[torch.Tensor] = []
        uploads = updates if self.heads is None else self.heads.showing(updates)
        for update in uploads:
            weights = sent_weights(update)
            mean.add(weights, update.aggregation_weight)
            heads.append(self.head_params(weights))
            counts.append(update.payload[COUNTS].to(self.device).long())
            update.weights = None
        if self.heads is None:
            self.load_weights(self.model, mean.value())
        elif not mean.empty:
            self.heads.head = mean.value()
            self.heads.dress(self.heads.shown)
        self.round_metrics = {}
        if not heads:
            return
        round_counts = torch.stack(counts)
        self.label_totals += round_counts.sum(0)
        self.trained = True  # broadcast from now on (as initialised when generator_steps=0)
        if self.generator_steps:
            self.generator_loss = self.train_generator(heads, round_counts, round_idx)
            self.round_metrics["generator_loss"] = self.generator_loss

    def head_params(self, weights: torch.Tensor) -> dict[str, torch.Tensor]:
        """The head's entries of a client's flat weights (or of its head's alone, clients of
        their own architectures), named as in the head module."""
        if self.heads is not None:
            head = as_block_model(self.model).head
            return {name: t.clone() for name, t in FlatState(head).views(weights).items()}
        n = len(self.head_prefix)
        return {
            name[n:]: tensor.clone()
            for name, tensor in self.flat.views(weights).items()
            if name.startswith(self.head_prefix)
        }

    def train_generator(
        self, heads: list[dict[str, torch.Tensor]], counts: torch.Tensor, round_idx: int
    ) -> float:
        """`generator_steps` Adam steps of the module docstring's objective, heads frozen."""
        head = as_block_model(self.model).head
        was_training = head.training
        head.eval()
        prior = counts.sum(0).to(torch.float32)
        gen = torch_generator(self.config.seed, "fedgen/server", round_idx, device=self.device)
        self.generator.train()
        total = torch.zeros((), device=self.device)
        for _ in range(self.generator_steps):
            z, y, noise = self.generator.sample(prior / prior.sum(), self.generator_batch, gen)
            logits = torch.stack([functional_call(head, params, (z,)) for params in heads])
            loss = ensemble_cross_entropy(logits, counts, y)
            if self.diversity_weight:
                loss = loss + self.diversity_weight * diversity_loss(z, noise)
            self.gen_optimizer.zero_grad()
            loss.backward()
            self.gen_optimizer.step()
            total += loss.detach()
        self.generator.eval()
        head.train(was_training)
        return float(total) / self.generator_steps

    # ------------------------------------------------------------------ evaluation
    def global_model(self) -> nn.Module:
        """The global model, or with clients of their own architectures the shown client's
        model under the global head (`_personal`)."""
        return super().global_model() if self.heads is None else self.heads.global_model()

    def personal_model(self, client_id: int, state: Mapping[str, torch.Tensor]) -> nn.Module:
        if self.heads is None:
            return super().personal_model(client_id, state)
        return self.heads.personal_model(client_id, state)

    def summary_metrics(self) -> dict[str, Any]:
        shown = {} if self.heads is None else self.heads.summary_metrics()
        return {**super().summary_metrics(), **shown}

    # ------------------------------------------------------------------ checkpoint
    def state_dict(self) -> dict[str, Any]:
        state = {
            **super().state_dict(),
            "label_totals": self.label_totals.clone(),
            "trained": self.trained,
        }
        if self.heads is not None:
            state["heads"] = {**self.heads.state_dict(), "head": self.heads.head}
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.label_totals = state["label_totals"].to(self.label_totals.device)
        self.trained = state["trained"]
        if self.heads is not None:
            self.heads.load_state_dict(state["heads"])
            self.heads.head = state["heads"]["head"].to(self.device)
