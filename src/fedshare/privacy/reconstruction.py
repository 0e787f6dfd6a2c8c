"""Reconstruction attack on shared activations (FLea's Section 4.4 and App. D, Fig. 9(c);
after Dosovitskiy & Brox).

The attacker knows the frozen global model and trains a decoder that maps the activations at
the shared block l back to the inputs. FLea's decoder (Table 5) is a stack of convolutions with
no activations between them, i.e. a linear map; here the decoder is a linear map too: a
`"dense"` one on the flattened activations (at least as strong as Table 5's local linear map),
or Table 5 itself (`"table5"`, for 16×32×32 CIFAR activations), both trained by Adam; or
`"ridge"`, the closed-form ridge regression (the best linear decoder, its penalty picked by exact
leave-one-out error), which needs no optimisation and cannot diverge or over-fit silently when
the activations have more dimensions than the attacker has samples (UCI-HAR: 17,920 vs 7,352).
The target is the *unnormalised* input (e.g. images in [0, 1]) and the score is the mean
squared error, reported beside `baseline_mse`, the error of predicting the mean input (an
attack that learnt nothing): `test_mse / baseline_mse` is 0 for a perfect reconstruction, 1 for
none.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from fedshare.data.dataset import Dataset
from fedshare.engine.rng import seed_global_torch, torch_generator
from fedshare.engine.training import fit, shuffled_positions
from fedshare.errors import FedshareError
from fedshare.models.base import as_block_model


def table5_decoder(in_channels: int = 16, out_channels: int = 3) -> nn.Module:
    """FLea's Table 5 decoder: 1×1 conv, 3×3 transposed conv (×2), 3×3 conv (/2), 1×1 conv."""
    return nn.Sequential(
        nn.Conv2d(in_channels, 32, 1),
        nn.ConvTranspose2d(32, 32, 3, stride=2, padding=1, output_padding=1),
        nn.Conv2d(32, 32, 3, stride=2, padding=1),
        nn.Conv2d(32, out_channels, 1),
    )


class DenseDecoder(nn.Module):
    """One linear map from flattened activations to flattened inputs."""

    def __init__(self, feature_shape: tuple[int, ...], input_shape: tuple[int, ...]) -> None:
        super().__init__()
        self.input_shape = input_shape
        self.linear = nn.Linear(
            int(torch.tensor(feature_shape).prod()), int(torch.tensor(input_shape).prod())
        )

    def forward(self, f: torch.Tensor) -> torch.Tensor:
        return self.linear(f.flatten(1)).view(-1, *self.input_shape)


def unnormalised(dataset: Dataset, x: torch.Tensor) -> torch.Tensor:
    """Stored inputs on the model's scale before normalisation (images in [0, 1])."""
    x = x.float()
    return x * dataset.scale if dataset.scale != 1.0 else x


@torch.no_grad()
def activations(model: nn.Module, x: torch.Tensor, split: int, batch: int = 512) -> torch.Tensor:
    """θ[:split](x) with the model in eval mode (the frozen global model)."""
    was = model.training
    model.eval()
    blocks = as_block_model(model)
    out = torch.cat([blocks.encode(chunk, split) for chunk in x.split(batch)])
    model.train(was)
    return out


@dataclass
class AttackResult:
    train_mse: float
    test_mse: float
    curve: list[float]
    """Training MSE per epoch (Adam decoders); leave-one-out MSE per penalty (ridge)."""
    baseline_mse: float = float("nan")
    """Test MSE of predicting the training inputs' mean."""
    penalty: float | None = None
    """The ridge penalty chosen (ridge only)."""

    @property
    def relative_test_mse(self) -> float:
        return self.test_mse / self.baseline_mse


DECODERS = ("dense", "table5", "ridge")

RIDGE_PENALTIES = tuple(10.0**k for k in range(-7, 4))
"""Ridge penalties tried, as multiples of the mean eigenvalue of the centred Gram matrix."""


def ridge_decoder(
    f_train: torch.Tensor,
    t_train: torch.Tensor,
    f_test: torch.Tensor,
    t_test: torch.Tensor,
    penalties: tuple[float, ...] = RIDGE_PENALTIES,
) -> AttackResult:
    """Closed-form ridge regression from flattened activations to flattened inputs (with an
    intercept), in the dual form (one n×n eigendecomposition for every penalty); the penalty
    with the least exact leave-one-out MSE on the training samples is used."""
    f, g = f_train.flatten(1).double(), f_test.flatten(1).double()
    t, t_out = t_train.flatten(1).double(), t_test.flatten(1).double()
    f_mean, t_mean = f.mean(0), t.mean(0)
    f, g, t = f - f_mean, g - f_mean, t - t_mean
    eigenvalues, vectors = torch.linalg.eigh(f @ f.T)
    eigenvalues = eigenvalues.clamp_min(0)
    projected = vectors.T @ t
    scale = float(eigenvalues.mean())
    loo: list[float] = []
    for penalty in penalties:
        shrink = eigenvalues / (eigenvalues + penalty * scale)
        fitted = vectors @ (shrink[:, None] * projected)
        leverage = (vectors.square() * shrink).sum(1) + 1 / len(t)  # hat diagonal (intercept)
        residual = (t - fitted) / (1 - leverage).clamp_min(1e-12)[:, None]
        loo.append(float(residual.square().mean()))
    best = min(range(len(penalties)), key=loo.__getitem__)
    weights = vectors @ (projected / (eigenvalues + penalties[best] * scale)[:, None])  # dual α
    train_mse = float((f @ (f.T @ weights) - t).square().mean())
    test_mse = float((g @ (f.T @ weights) - (t_out - t_mean)).square().mean())
    baseline = float((t_out - t_mean).square().mean())
    return AttackResult(train_mse, test_mse, loo, baseline, penalties[best])


def reconstruction_attack(
    model: nn.Module,
    dataset: Dataset,
    split: int | None = None,
    train_size: int = 2000,
    test_size: int = 500,
    epochs: int = 20,
    batch_size: int = 128,
    lr: float = 1e-3,
    decoder: str = "dense",
    seed: int = 0,
) -> AttackResult:
    """Fit a linear decoder on (θ[:l](x), x) for `train_size` training samples; report the
    training MSE (final epoch), the MSE on `test_size` test samples and the curve."""
    if decoder not in DECODERS:
        raise FedshareError(f"unknown decoder {decoder!r}; valid choices: {', '.join(DECODERS)}")
    if split is None:  # FLea's split (the layer whose activations are shared), else share_layer
        split = getattr(model, "flea_layer", None) or getattr(model, "share_layer", None)
    if split is None:
        raise FedshareError("the reconstruction attack needs a block model with a split point")
    gen = torch_generator(seed, "attack/reconstruction")
    device = dataset.device
    train_size = min(train_size, len(dataset.y_train))
    test_size = min(test_size, len(dataset.y_test))
    train_idx = torch.randperm(len(dataset.y_train), generator=gen)[:train_size].to(device)
    test_idx = torch.randperm(len(dataset.y_test), generator=gen)[:test_size].to(device)
    x_train = dataset.prepare(dataset.x_train[train_idx])
    x_test = dataset.prepare(dataset.x_test[test_idx])
    f_train, f_test = activations(model, x_train, split), activations(model, x_test, split)
    t_train = unnormalised(dataset, dataset.x_train[train_idx])
    t_test = unnormalised(dataset, dataset.x_test[test_idx])
    if decoder == "ridge":
        return ridge_decoder(f_train, t_train, f_test, t_test)
    seed_global_torch(seed, "attack/decoder")
    if decoder == "dense":
        net: nn.Module = DenseDecoder(tuple(f_train.shape[1:]), tuple(t_train.shape[1:]))
    else:
        net = table5_decoder(f_train.shape[1], t_train.shape[1])
    net = net.to(device)
    optimizer = torch.optim.Adam(net.parameters(), lr=lr)
    curve: list[float] = []
    epoch_sum = 0.0

    def step_loss(part: torch.Tensor) -> torch.Tensor:
        nonlocal epoch_sum
        part = part.to(device)
        loss = F.mse_loss(net(f_train[part]), t_train[part])
        epoch_sum += float(loss.detach()) * len(part)
        return loss

    for _ in range(epochs):
        epoch_sum = 0.0
        fit(optimizer, shuffled_positions(train_size, batch_size, gen, "cpu", 1), step_loss)
        curve.append(epoch_sum / train_size)
    with torch.no_grad():
        test_mse = float(F.mse_loss(net(f_test), t_test))
    baseline = float(F.mse_loss(t_train.mean(0).expand_as(t_test), t_test))
    return AttackResult(curve[-1] if curve else float("nan"), test_mse, curve, baseline)
