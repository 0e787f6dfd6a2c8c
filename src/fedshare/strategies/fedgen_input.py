"""The "FedGen" row of FLea's Table 1: an input-space generator, as FLea describes its baseline
(FLea's App. C.3; lower fidelity: the baseline is not in FLea's code, read at b85be07). Not FedGen
itself (Zhu et al., ICML 2021), whose generator makes latent features against the clients' heads:
that is `strategy=fedgen` (`strategies/fedgen.py`).

A conditional generator G maps (onehot(y) ⊕ z, z ~ N(0, I_32)) to an input x̂: four
ConvTranspose2d layers (1×1 → 4×4 → 8×8 → 16×16 → 32×32, BatchNorm and ReLU between them),
resized bilinearly to the dataset's input size; for flat inputs four Linear layers. Rounds
< `warmup_rounds` (30) are plain FedAvg. From then on, after each aggregation, the server trains
G for `generator_steps` Adam steps with the new global model θ frozen as the judge,

    L_G = CE(θ(G(y, z)), y) + `diversity_weight` · exp(−mean_{i,j} ‖x̂_i − x̂_j‖₁ · ‖z_i − z_j‖²),

y uniform over the classes (the second term is FedGen's diversity loss, which keeps G from
collapsing onto one input per class), and sends G's weights with the next broadcast (counted as
shared bytes). Each local step adds `gen_weight` · CE(f(x̂), ŷ) on a batch of generated inputs
of uniformly drawn labels ŷ, so classes a client lacks still shape its model.
"""

import copy
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from fedshare.config.rules import NON_NEGATIVE, SIZE, STEPS, WIDTH, ruled
from fedshare.engine.batched import Batch
from fedshare.engine.client import Client
from fedshare.engine.rng import seed_global_torch, torch_generator
from fedshare.errors import FedshareError
from fedshare.functional.generative import diversity_loss
from fedshare.strategies._local import train_stacked
from fedshare.strategies._server_generator import ServerGenerator
from fedshare.strategies.base import Message, SetupContext, Update, register_strategy


class Generator(nn.Module):
    """(labels, noise) -> inputs of `input_shape`: a transposed-conv stack for (C, H, W) inputs,
    an MLP for flat ones."""

    def __init__(
        self, num_classes: int, noise_dim: int, input_shape: tuple[int, ...], width: int
    ) -> None:
        super().__init__()
        self.num_classes, self.noise_dim, self.input_shape = num_classes, noise_dim, input_shape
        d = num_classes + noise_dim
        if len(input_shape) == 3:
            w = width
            self.net: nn.Module = nn.Sequential(
                nn.ConvTranspose2d(d, 4 * w, 4, 1, 0), nn.BatchNorm2d(4 * w), nn.ReLU(),
                nn.ConvTranspose2d(4 * w, 2 * w, 4, 2, 1), nn.BatchNorm2d(2 * w), nn.ReLU(),
                nn.ConvTranspose2d(2 * w, w, 4, 2, 1), nn.BatchNorm2d(w), nn.ReLU(),
                nn.ConvTranspose2d(w, input_shape[0], 4, 2, 1),
            )  # fmt: skip
        elif len(input_shape) == 1:
            h = 4 * width
            self.net = nn.Sequential(
                nn.Linear(d, h), nn.BatchNorm1d(h), nn.ReLU(),
                nn.Linear(h, h), nn.BatchNorm1d(h), nn.ReLU(),
                nn.Linear(h, h), nn.BatchNorm1d(h), nn.ReLU(),
                nn.Linear(h, input_shape[0]),
            )  # fmt: skip
        else:
            raise FedshareError(
                f"strategy=fedgen_input generates inputs of shape (C, H, W) or (D,), "
                f"not {input_shape}"
            )

    def forward(self, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        h = torch.cat([F.one_hot(y, self.num_classes).to(z.dtype), z], dim=1)
        if len(self.input_shape) == 1:
            return self.net(h)
        out = self.net(h[:, :, None, None])
        size = tuple(self.input_shape[1:])
        if tuple(out.shape[2:]) != size:
            out = F.interpolate(out, size=size, mode="bilinear", align_corners=False)
        return out

    def sample(
        self, n: int, gen: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """n inputs of uniformly drawn labels, with the labels and the noise."""
        device = next(self.parameters()).device
        y = torch.randint(self.num_classes, (n,), generator=gen, device=device)
        z = torch.randn((n, self.noise_dim), generator=gen, device=device)
        return self(y, z), y, z


@register_strategy("fedgen_input")
@dataclass
class FedGenInput(ServerGenerator[Generator]):
    """FedAvg, then a server-trained conditional generator whose samples join local training."""

    warmup_rounds: int = ruled(
        30,
        NON_NEGATIVE,
        source="paper: FLea App. C.3, plain FedAvg for the first 30 rounds before the generator",
    )
    noise_dim: int = ruled(
        32,
        WIDTH,
        source="code: FedGen's code (zhuangdizhu/FedGen, utils/model_config.py L20: noise_dim 32)",
    )
    width: int = ruled(
        32,
        WIDTH,
        source="rule: FLea App. C.3 gives four ConvTranspose2d layers without widths; 32 channels "
        "last (fedshare's choice)",
    )
    generator_steps: int = ruled(
        50,
        STEPS,
        source="code: FedGen's code (zhuangdizhu/FedGen, serverpFedGen.py L97-100: 50 generator "
        "steps a round); FLea App. C.3 names no value",
    )
    generator_batch: int = ruled(
        32,
        SIZE,
        source="code: FedGen's code (zhuangdizhu/FedGen, serverpFedGen.py L97-98: the run's batch "
        "size, main.py's 32)",
    )
    diversity_weight: float = ruled(
        1.0,
        NON_NEGATIVE,
        source="code: FedGen's code (zhuangdizhu/FedGen, utils/model_config.py L57: ensemble_eta = "
        "1); FLea App. C.3 names no value",
    )
    gen_weight: float = ruled(
        1.0,
        NON_NEGATIVE,
        source="paper: FedGen §3.2 Eq. 5, the generated term at unit weight",
    )

    def _generator(
        self, model: nn.Module, num_classes: int, input_shape: tuple[int, ...], seed: int
    ) -> Generator:
        seed_global_torch(seed, "fedgen/generator")  # the same initial G on both sides
        return Generator(num_classes, self.noise_dim, tuple(input_shape), self.width)

    def setup(self, ctx: SetupContext) -> None:
        super().setup(ctx)
        self.judge = copy.deepcopy(ctx.model).requires_grad_(False)

    # ------------------------------------------------------------------ protocol
    def active(self, round_idx: int) -> bool:
        """G is trained after aggregating round warmup_rounds − 1 and used from warmup_rounds."""
        return round_idx >= self.warmup_rounds

    def broadcast(self, round_idx: int) -> Message:
        message = super().broadcast(round_idx)
        if self.active(round_idx):
            message.payload["generator"] = self.gen_flat.flatten(self.generator)
        return message

    def client_update(self, client: Client, message: Message) -> Update:
        model = self.load_weights(client.model, message.weights)
        if "generator" not in message.payload:
            return self.trained_update(client, model)
        batches = self.generated_batches(client, message)
        return self.trained_update(client, model, self.generated_loss, batches=batches)

    def batched_update(self, clients: list[Client], message: Message) -> list[Update]:
        """The same step for several clients at once: each client's stream adds its own draws
        from the received generator to its batches."""
        model = self.load_weights(clients[0].model, message.weights)
        if "generator" not in message.payload:
            return train_stacked(self.flat, clients, model)
        streams = [self.generated_batches(client, message) for client in clients]
        return train_stacked(self.flat, clients, model, self.generated_loss, streams=streams)

    def generated_batches(self, client: Client, message: Message) -> Iterator[Batch]:
        """(x, y, x_gen, y_gen): each local batch with as many samples of the received
        generator, drawn from the client's own stream."""
        self.gen_flat.load_(self.generator, message.payload["generator"])
        generator = self.generator.eval()
        draws = client.rng("generator")
        for x, y in client.batches():
            with torch.no_grad():
                x_gen, y_gen, _ = generator.sample(len(x), draws)
            yield x, y, x_gen, y_gen

    def generated_loss(
        self,
        net: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        x_gen: torch.Tensor,
        y_gen: torch.Tensor,
    ) -> torch.Tensor:
        """CE on the local batch + gen_weight · CE on the generated one."""
        loss = F.cross_entropy(net(x), y)
        return loss + self.gen_weight * F.cross_entropy(net(x_gen), y_gen)

    def aggregate(self, updates: Iterable[Update], round_idx: int) -> None:
        super().aggregate(updates, round_idx)
        self.round_metrics = {}
        if self.active(round_idx + 1) and self.generator_steps:
            self.generator_loss = self.train_generator(round_idx)
            self.round_metrics["generator_loss"] = self.generator_loss

    def train_generator(self, round_idx: int) -> float:
        """`generator_steps` Adam steps of L_G against the frozen global model."""
        judge = self.load_weights(self.judge, self.flat.flatten(self.model)).eval()
        gen = torch_generator(self.config.seed, "fedgen/server", round_idx, device=self.device)
        self.generator.train()
        total = torch.zeros((), device=self.device)
        for _ in range(self.generator_steps):
            x, y, z = self.generator.sample(self.generator_batch, gen)
            loss = F.cross_entropy(judge(x), y)
            if self.diversity_weight:
                loss = loss + self.diversity_weight * diversity_loss(x, z)
            self.gen_optimizer.zero_grad()
            loss.backward()
            self.gen_optimizer.step()
            total += loss.detach()
        self.generator.eval()
        return float(total) / self.generator_steps
