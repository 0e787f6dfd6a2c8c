"""SCAFFOLD (Karimireddy et al., ICML 2020), option II: control variates correct client drift.

The server keeps the global model x and the control variate c; client i keeps its own c_i in
`client.state` (the strategy object is the server and holds nothing per client). One round:

* broadcast: x as weights and c as a payload tensor (counted in `bytes_down` and, being a
  non-weight tensor, in `bytes_shared`);
* local steps on the corrected gradient g − c_i + c (after optional clipping of g);
* option II: c_i+ = c_i − c + (x − y_i)/(K·η), K the local steps taken, η the round's lr;
* upload: y_i as weights (the server knows x, so this is Δy_i = y_i − x at the same cost) and
  Δc_i = c_i+ − c_i as a payload; with c that doubles the traffic of FedAvg both ways;
* server: x += lr_global · mean_S(Δy_i) (weighted by samples, as FedAvg), and
  c += Σ_S (n_i/n)·Δc_i (n = all clients' samples): the paper's (|S|/N)·mean_S(Δc_i) for equal
  client sizes, and c stays the n_i-weighted mean of every c_i for unequal ones.

Optimizer. The paper's local steps are plain SGD, y ← y − η(g − c_i + c), and option II reads
the mean corrected gradient off the path as (x − y_i)/(K·η): both hold only for momentum-free
SGD. `correction=gradient` (default, the paper's form) refuses any other optimizer, and the
strategy's `train_defaults` make plain SGD (lr 0.05, momentum 0) the default on every dataset,
whatever the dataset's own optimizer (Adam on CIFAR, audio, HAR and feature files, under which
option II's c grew to ‖c‖ ≈ 50 and the run stayed at chance, docs/baselines.md).
`correction=after_step` is the explicit form of ReBaFL's code for SGD with momentum: the
optimizer steps on the (clipped) raw gradient and y ← y − η(c − c_i) follows each step; c_i⁺
keeps option II's formula. It equals `gradient` for momentum-free SGD without weight decay.

ReBaFL's baseline settings (its code; Section 5.1 names the baseline): server lr 1, gradient
clipping at norm 10, c incremented by the mean Δc_i without the |S|/N factor
(`scale_c_by_fraction=false`), SGD momentum 0.5 with `correction=after_step` (the ReBaFL tables'
`scaffold` method).
"""

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from fedshare.config.rules import ANY, NON_NEGATIVE, POSITIVE, Rule, ruled
from fedshare.engine.aggregation import RunningMean
from fedshare.engine.batched import Rows, clip_rows
from fedshare.engine.client import Client
from fedshare.strategies._local import train_local, train_stacked
from fedshare.strategies._optimizer import require_sgd
from fedshare.strategies._param_vector import ParamVectorStrategy
from fedshare.strategies.base import Message, SetupContext, Update, register_strategy, sent_weights

CORRECTIONS = ("gradient", "after_step")


@register_strategy("scaffold")
@dataclass
class Scaffold(ParamVectorStrategy):
    """SCAFFOLD with option II control-variate updates; c and c_i cover the trainable
    parameters (buffers such as BatchNorm statistics are averaged as in FedAvg)."""

    train_defaults: ClassVar[Mapping[str, Any]] = {"optimizer": "sgd", "lr": 0.05, "momentum": 0.0}
    """Plain SGD on every dataset (the paper's local solver, which option II assumes): with
    momentum 0.9 (the digits default) the run diverged in round 8, with Adam 1e-3 it stayed
    at chance (docs/baselines.md)."""

    lr_global: float = ruled(
        1.0,
        POSITIVE,
        source="paper: SCAFFOLD (Karimireddy et al., ICML 2020) §7.1, 'We always use global "
        "step-size η_g = 1' (Algorithm 1 takes η_g as input)",
    )
    update_controls: bool = ruled(
        True,
        ANY,
        source="paper: SCAFFOLD (Karimireddy et al., ICML 2020) Algorithm 1 lines 12-14 (false "
        "is FedAvg)",
    )
    scale_c_by_fraction: bool = ruled(
        True,
        ANY,
        source="paper: SCAFFOLD (Karimireddy et al., ICML 2020) Algorithm 1 line 17, c += "
        "(|S|/N)·mean(Δc_i)",
    )
    clip_norm: float = ruled(
        0.0,
        NON_NEGATIVE,
        source="rule: off, the paper's update has no clipping (ReBaFL's code, methods/scaffold.py "
        "L77: max_grad_norm 10)",
    )
    correction: str = ruled(
        "gradient",
        Rule(choices=CORRECTIONS),
        source="paper: SCAFFOLD (Karimireddy et al., ICML 2020) Algorithm 1 line 10, the step on "
        "g − c_i + c",
    )
    """gradient: g − c_i + c is the step's gradient (the paper; plain SGD only); after_step:
    y −= η(c − c_i) after each SGD step (ReBaFL's code; SGD with any momentum)."""

    def setup(self, ctx: SetupContext) -> None:
        super().setup(ctx)
        require_sgd(
            ctx.config.train,
            "scaffold",
            momentum_free=self.correction == "gradient",
            why="option II's c_i⁺ = c_i − c + (x − y_i)/(K·η) reads the corrected gradient "
            "off an SGD path",
            instead="or strategy.correction=after_step for SGD with momentum (ReBaFL's code)",
        )
        self.c = torch.zeros(self.pv.numel, device=ctx.device)

    def batched_step(self) -> Callable[[list[Client], Message], list[Update]] | None:
        """The gradient form trains several clients at once; `after_step` runs serially."""
        return super().batched_step() if self.correction == "gradient" else None

    def broadcast(self, round_idx: int) -> Message:
        return Message(weights=self.flat.flatten(self.model), payload={"c": self.c})

    def client_update(self, client: Client, message: Message) -> Update:
        model = self.load_weights(client.model, message.weights)
        params = self.pv.params(model)
        correction = message.payload["c"] - self._c_i(client, message)
        after_step = self.correction == "after_step"
        steps = 0

        def corrected(_: nn.Module) -> None:
            nonlocal steps
            steps += 1
            if self.clip_norm > 0:
                torch.nn.utils.clip_grad_norm_(params, self.clip_norm)
            if not after_step:
                self.pv.add_to_grads(params, correction)

        chunks = correction.split(self.pv.sizes)
        per_param = [c.view_as(p) for p, c in zip(params, chunks, strict=True)]

        def step_back(_: nn.Module) -> None:
            with torch.no_grad():
                torch._foreach_add_(params, per_param, alpha=-client.lr)

        loss = train_local(
            client, model, grad_hook=corrected, step_hook=step_back if after_step else None
        )
        return self._upload(client, message, self.flat.flatten(model), steps, loss)

    def batched_update(self, clients: list[Client], message: Message) -> list[Update]:
        """`client_update` for several clients (`train.batched`): each row's gradient is
        clipped on its own norm and corrected by its own c − c_i."""
        model = self.load_weights(clients[0].model, message.weights)
        c = message.payload["c"]
        corrections = self.pv.per_param(c - torch.stack([self._c_i(k, message) for k in clients]))

        steps = torch.zeros(len(clients), dtype=torch.long, device=clients[0].device)

        def corrected(params: dict, grads: dict, rows: Rows) -> dict[str, torch.Tensor]:
            steps[rows] += 1  # on the device: no host sync per step
            if self.clip_norm > 0:
                grads = clip_rows(grads, self.clip_norm)
            return {n: g + corrections[n][rows] for n, g in grads.items()}

        updates = train_stacked(self.flat, clients, model, grad_hook=corrected)
        return [
            self._upload(client, message, sent_weights(u), int(k), u.metrics["train_loss"])
            for client, u, k in zip(clients, updates, steps, strict=True)
        ]

    @staticmethod
    def _c_i(client: Client, message: Message) -> torch.Tensor:
        return client.state.get("c", torch.zeros_like(message.payload["c"]))

    def _upload(
        self, client: Client, message: Message, y: torch.Tensor, steps: int, loss: torch.Tensor
    ) -> Update:
        """Option II's c_i+ from the client's K = `steps` local steps, kept in its state; y and
        Δc_i uploaded."""
        c, c_i = message.payload["c"], self._c_i(client, message)
        if self.update_controls and steps > 0:
            drift = self.pv.of(sent_weights(message)) - self.pv.of(y)
            c_new = c_i - c + drift / (steps * client.lr)
        else:
            c_new = c_i
        client.state["c"] = c_new
        return Update(
            client.id,
            client.num_samples,
            weights=y,
            payload={"delta_c": c_new - c_i},
            metrics={"train_loss": loss},
        )

    def aggregate(self, updates: Iterable[Update], round_idx: int) -> None:
        x = self.flat.flatten(self.model)
        ys = RunningMean()
        delta_c = torch.zeros_like(self.c)
        for update in updates:
            ys.add(sent_weights(update), update.aggregation_weight)
            update.weights = None
            delta_c.add_(update.payload["delta_c"], alpha=update.aggregation_weight)
        if ys.empty:
            return
        y_mean = ys.value()
        # lr_global = 1 takes the mean itself (x + (ȳ − x) would differ from FedAvg by rounding)
        new = y_mean if self.lr_global == 1.0 else x + self.lr_global * (y_mean - x)
        self.load_weights(self.model, new)
        if self.update_controls:
            # c stays the n_i-weighted mean of every c_i: Σ_S (n_i/n)·Δc_i, which is
            # (|S|/N)·mean_S(Δc_i) for equal client sizes; else the cohort's weighted mean
            total = sum(self.data.client_sizes) if self.scale_c_by_fraction else ys.total_weight
            self.c += delta_c / total

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "c": self.c.cpu()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.c = state["c"].to(self.device)
