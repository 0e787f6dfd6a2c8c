"""Batched clients (`train.batched`): several clients' local training as one vectorised step.

The clients' parameters are stacked along a new first axis and the model runs once per step
over all of them with `torch.func.functional_call` under `vmap`, each client on its own
mini-batch. Summing the per-client losses and calling backward gives every client its own
gradient (the clients share no parameter), so each stacked row follows exactly the steps the
client would take alone:

* every client draws its batches from its own stream (`Client.batches`), as in serial training;
* at each step, the clients whose next batch has the same shape step together (one vmapped
  call per shape); a client whose batches are used up stops (different sizes and epochs work);
* BatchNorm statistics are stacked per client and updated in place by the vmapped forward;
* the optimizer (`StackedOptimizer`) keeps per-client momentum / Adam moments and step counts;
* `train.amp` runs the stacked losses under bf16 autocast, as serial training does;
* a loss may take tensors of its own per client (`client_inputs`, e.g. its class counts), so a
  strategy whose local loss depends on the client (FedLC, FedRS, BSM-FedAvg, ReBaFL) steps
  batched too;
* a gradient hook sees the stepping rows' parameters, gradients and row indices and returns
  the gradients the optimizer takes (FedProx's proximal term, SCAFFOLD's per-client clipping
  and correction, FedDyn's per-client linear term), as a serial `grad_hook` does (it runs once
  per step, so it can also count each client's steps: SCAFFOLD's K).

Equal to serial training up to floating-point rounding for models without dropout (tested for
FedAvg and FedProx on cnn_small, lenet_fmnist and a BatchNorm CNN, and for every strategy with
a batched step, `tests/test_batched.py`); with dropout each client
draws its own masks, but not from the serial run's stream. Integer buffers (BatchNorm's
`num_batches_tracked`) stay unstacked. Whether it pays depends on the device: on a GPU one
vmapped step replaces many tiny kernels; on a CPU the arithmetic is the same and the grouped
convolutions it becomes can be slower (docs/performance.md has the measurements).
"""

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import cast

import torch
from torch import nn
from torch.func import functional_call, vmap

from fedshare.config import TrainConfig
from fedshare.engine.client import Client
from fedshare.engine.training import bf16_autocast
from fedshare.functional.transfer import to_device

StackedLoss = Callable[..., torch.Tensor | tuple[torch.Tensor, torch.Tensor]]
"""`loss(model, *batch)`, e.g. `loss(model, x, y)`, or `loss(model, *batch, *inputs)` with the
client's rows of `client_inputs`. It may return `(loss, aux)`: a 1-d tensor of statistics that
the run sums over each client's steps (`StackedRun.aux`; FLea's dCor)."""
Batch = tuple[torch.Tensor, ...]
"""One client's batch: `Samples` (x, y), or whatever its stream yields (FedMix's mixed batch)."""
Rows = torch.Tensor | slice
"""The stepping clients: an index tensor, or `slice(None)` when every client steps."""
StackedGradHook = Callable[
    [dict[str, torch.Tensor], dict[str, torch.Tensor], Rows], dict[str, torch.Tensor]
]
"""(the stepping rows' parameters, their gradients, the rows) -> the gradients to step with,
outside autograd like a serial `grad_hook` (index a per-client tensor with the rows)."""

ADAM_EPS = 1e-8  # torch.optim.Adam's default, which `make_optimizer` uses


def clip_rows(grads: dict[str, torch.Tensor], max_norm: float) -> dict[str, torch.Tensor]:
    """`torch.nn.utils.clip_grad_norm_` for each row (client) of stacked gradients: a row
    whose L2 norm over all parameters exceeds `max_norm` is scaled by max_norm/(norm + 1e-6)."""
    # `grads` is never empty (a model with trainable parameters), so the sum is a tensor
    squares = cast(torch.Tensor, sum(g.flatten(1).pow(2).sum(1) for g in grads.values()))
    scale = (max_norm / (squares.sqrt() + 1e-6)).clamp(max=1.0)
    return {n: g * scale.view(-1, *[1] * (g.dim() - 1)) for n, g in grads.items()}


def grad_of(param: torch.Tensor) -> torch.Tensor:
    """`param.grad`, which the backward pass before every step has filled."""
    assert param.grad is not None
    return param.grad


@dataclass
class StackedOptimizer:
    """SGD (momentum, weight decay) or Adam over stacked parameters, updating chosen rows:
    the arithmetic of `torch.optim.SGD` / `Adam` as `engine.optim.make_optimizer` builds them,
    with the state kept per client (row). `optimizer_reset_each_step` clears it after a step."""

    train: TrainConfig
    lr: float
    state: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)
    steps: torch.Tensor | None = None

    @torch.no_grad()
    def step(self, params: dict[str, torch.Tensor], rows: Rows) -> None:
        """Update `params` (stacked leaves with `.grad`) at `rows`."""
        first = next(iter(params.values()))
        if self.steps is None or self.train.optimizer_reset_each_step:
            self.steps = torch.zeros(len(first), device=first.device)
            self.state = {}
        self.steps[rows] += 1
        for name, p in params.items():
            grad = grad_of(p)[rows]
            if self.train.weight_decay:
                grad = grad.add(p[rows], alpha=self.train.weight_decay)
            if self.train.optimizer == "adam":
                p[rows] = p[rows] - self._adam(name, p, grad, rows)
            else:
                p[rows] = p[rows] - self.lr * self._momentum(name, p, grad, rows)

    @property
    def _steps(self) -> torch.Tensor:
        """The step counts, which `step` sets before it updates a row."""
        assert self.steps is not None
        return self.steps

    def _slot(self, name: str, key: str, like: torch.Tensor) -> torch.Tensor:
        return self.state.setdefault(name, {}).setdefault(key, torch.zeros_like(like))

    def _momentum(self, name: str, p: torch.Tensor, grad: torch.Tensor, pick) -> torch.Tensor:
        if not self.train.momentum:
            return grad
        buf = self._slot(name, "momentum", p)
        first = (self._steps[pick] == 1).view(-1, *[1] * (grad.dim() - 1))
        # torch's SGD starts the buffer at the first gradient, then buf·momentum + grad
        buf[pick] = torch.where(first, grad, buf[pick] * self.train.momentum + grad)
        return buf[pick]

    def _adam(self, name: str, p: torch.Tensor, grad: torch.Tensor, pick) -> torch.Tensor:
        b1, b2 = self.train.betas
        m, v = self._slot(name, "m", p), self._slot(name, "v", p)
        m[pick] = m[pick] * b1 + grad * (1 - b1)
        v[pick] = v[pick] * b2 + grad * grad * (1 - b2)
        shape = (-1, *[1] * (grad.dim() - 1))
        t = self._steps[pick].view(shape)
        denom = (v[pick] / (1 - b2**t)).sqrt() + ADAM_EPS
        return self.lr / (1 - b1**t) * m[pick] / denom


class _LossOf(nn.Module):
    """`loss_fn(model, *batch[, inputs])` as a module, so `functional_call` can swap the
    model's tensors."""

    def __init__(self, model: nn.Module, loss_fn: StackedLoss) -> None:
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        return self.loss_fn(self.model, *tensors)


def stacked(tensors: Mapping[str, torch.Tensor], copies: int) -> dict[str, torch.Tensor]:
    return {n: t.detach().unsqueeze(0).repeat(copies, *[1] * t.dim()) for n, t in tensors.items()}


class StackedRun:
    """One chunk of clients trained together from `model`'s current weights (see module doc)."""

    def __init__(
        self,
        clients: list[Client],
        model: nn.Module,
        loss_fn: StackedLoss,
        grad_hook: StackedGradHook | None = None,
        client_inputs: torch.Tensor | tuple[torch.Tensor, ...] | None = None,
        streams: list[Iterator[Batch]] | None = None,
    ) -> None:
        """`client_inputs`: a tensor or a tuple of tensors whose row i is passed to client i's
        loss after its batch. `streams`: each client's batches (tuples of tensors, the loss's
        arguments after the model); default `client.batches()`."""
        self.clients = clients
        self.streams = streams
        if client_inputs is None:
            client_inputs = ()
        self.inputs = client_inputs if isinstance(client_inputs, tuple) else (client_inputs,)
        self.model = model
        self.grad_hook = grad_hook
        count = len(clients)
        trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
        self.params = {n: t.requires_grad_() for n, t in stacked(trainable, count).items()}
        self.fixed = {
            f"model.{n}": p.detach() for n, p in model.named_parameters() if not p.requires_grad
        }
        floats = {n: b for n, b in model.named_buffers() if b.is_floating_point()}
        self.buffers = stacked(floats, count)
        self.fixed.update(
            {f"model.{n}": b for n, b in model.named_buffers() if not b.is_floating_point()}
        )
        wrapper = _LossOf(model, loss_fn)

        def one_client(params, buffers, *tensors):
            named = {f"model.{n}": t for n, t in {**params, **buffers}.items()}
            return functional_call(wrapper, {**named, **self.fixed}, tensors)

        self.losses = vmap(one_client, randomness="different")
        self.amp_device = clients[0].amp_device
        self.optimizer = StackedOptimizer(clients[0].train, clients[0].lr)

    def run(self) -> list[torch.Tensor]:
        """Train to the end of every client's batches; the mean loss per client."""
        self.model.train()
        streams: list[Iterator[Batch] | None] = (
            [c.batches() for c in self.clients] if self.streams is None else list(self.streams)
        )
        device = self.clients[0].device
        totals = torch.zeros(len(self.clients), device=device)
        counts = torch.zeros(len(self.clients), device=device)
        self.aux: torch.Tensor | None = None
        while True:
            batches = {}
            for i, stream in enumerate(streams):
                batch = next(stream, None) if stream is not None else None
                if batch is None:
                    streams[i] = None
                else:
                    batches[i] = batch
            if not batches:
                break
            for rows, batch in self._groups(batches):
                losses = self._step(rows, batch)
                totals[rows] += losses
                counts[rows] += 1
        return list(totals / counts.clamp(min=1))

    def _groups(self, batches: dict[int, Batch]) -> Iterator[tuple[Rows, Batch]]:
        """The step's batches grouped by shape: (rows, each tensor stacked over the rows)."""
        shapes: dict[tuple, list[int]] = {}
        for i, batch in batches.items():
            shapes.setdefault(tuple(tuple(t.shape) for t in batch), []).append(i)
        for members in shapes.values():
            group = [batches[i] for i in members]
            stacked_batch = tuple(torch.stack(ts) for ts in zip(*group, strict=True))
            every = len(members) == len(self.clients)
            device = stacked_batch[0].device
            rows = slice(None) if every else to_device(torch.tensor(members), device)
            yield rows, stacked_batch

    def _step(self, rows: Rows, batch: Batch) -> torch.Tensor:
        every = isinstance(rows, slice)
        for p in self.params.values():
            p.grad = None
        if every:
            params, buffers, inputs = self.params, self.buffers, self.inputs
        else:
            params = {n: p[rows] for n, p in self.params.items()}
            buffers = {n: b[rows] for n, b in self.buffers.items()}
            inputs = tuple(t[rows] for t in self.inputs)
        with bf16_autocast(self.amp_device):
            losses = self.losses(params, buffers, *batch, *inputs)
        if isinstance(losses, tuple):
            losses, aux = losses
            if self.aux is None:
                self.aux = torch.zeros(len(self.clients), *aux.shape[1:], device=aux.device)
            self.aux[rows] += aux.detach().float()
        losses.float().sum().backward()
        with torch.no_grad():
            if not every:
                for n, b in buffers.items():
                    self.buffers[n][rows] = b
            if self.grad_hook is not None:
                live = {n: p.detach()[rows] for n, p in self.params.items()}
                grads = {n: grad_of(p)[rows] for n, p in self.params.items()}
                for n, g in self.grad_hook(live, grads, rows).items():
                    grad_of(self.params[n])[rows] = g
        self.optimizer.step(self.params, rows)
        return losses.detach().float()

    @torch.no_grad()
    def start_row(self, i: int, model: nn.Module) -> None:
        """Start client `i` from `model`'s weights and BN statistics instead of the shared
        model's (clients that keep part of the model themselves, e.g. FedBN). Only the stacked
        entries are per row: frozen parameters and integer buffers stay one shared copy."""
        named = dict(model.named_parameters())
        for n, p in self.params.items():
            p[i] = named[n]
        buffers = dict(model.named_buffers())
        for n, b in self.buffers.items():
            b[i] = buffers[n]

    @torch.no_grad()
    def load_client(self, i: int) -> nn.Module:
        """Copy client `i`'s trained parameters and BN statistics into the model; return it."""
        named = dict(self.model.named_parameters())
        for n, p in self.params.items():
            named[n].copy_(p[i])
        buffers = dict(self.model.named_buffers())
        for n, b in self.buffers.items():
            buffers[n].copy_(b[i])
        return self.model
