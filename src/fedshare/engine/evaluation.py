"""Evaluation of the global model on the test set, and the run's evaluation callback."""

import math
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedshare.config.schema import EvalConfig
from fedshare.data.dataset import Dataset
from fedshare.data.federated import FederatedData
from fedshare.engine.callbacks import Callback, Measure
from fedshare.engine.personal_eval import personal_metrics, personal_test_splits
from fedshare.errors import FedshareError, NonFiniteLossError
from fedshare.metrics.separability import davies_bouldin, has_features, penultimate
from fedshare.privacy.context import run_attack_summary

if TYPE_CHECKING:
    from fedshare.engine.simulation import Simulation


def evaluate(
    model: nn.Module,
    dataset: Dataset,
    batch_size: int = EvalConfig.batch_size,
    per_class: bool = False,
) -> dict[str, Any]:
    """Accuracy (percent), mean cross-entropy loss and optionally per-class accuracy on the
    test set (by default in batches of `eval.batch_size`'s default)."""
    n = len(dataset.y_test)
    if n == 0 or batch_size < 1:
        raise FedshareError(
            f"cannot evaluate on {n} test samples of {dataset.name} in batches of {batch_size}: "
            f"an accuracy needs at least one sample and eval.batch_size >= 1"
        )
    batches = [
        (dataset.x_test[start : start + batch_size], dataset.y_test[start : start + batch_size])
        for start in range(0, n, batch_size)
    ]
    return evaluate_batches(model, dataset, batches, per_class)


@torch.no_grad()
def evaluate_batches(
    model: nn.Module,
    dataset: Dataset,
    batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
    per_class: bool = False,
) -> dict[str, Any]:
    """Accuracy (percent), mean cross-entropy loss and optionally per-class accuracy over
    `batches` of raw inputs and labels of `dataset` (prepared without augmentation), with
    the model in eval mode."""
    n = sum(len(y) for _, y in batches)
    was_training = model.training
    model.eval()
    correct = torch.zeros(dataset.num_classes, device=dataset.device)
    total = torch.zeros(dataset.num_classes, device=dataset.device)
    loss_sum = torch.zeros((), device=dataset.device)
    for raw, y in batches:
        logits = model(dataset.prepare(raw))
        loss_sum += F.cross_entropy(logits, y, reduction="sum")
        hit = (logits.argmax(dim=1) == y).float()
        correct.index_add_(0, y, hit)
        total.index_add_(0, y, torch.ones_like(hit))
    model.train(was_training)
    result: dict[str, Any] = {
        "accuracy": 100.0 * float(correct.sum()) / n,
        "loss": float(loss_sum) / n,
    }
    if per_class:
        acc = 100.0 * correct / total.clamp_min(1)
        result["per_class_accuracy"] = [round(a, 4) for a in acc.tolist()]
    return result


def validation_metrics(data: FederatedData, model: nn.Module, batch_size: int) -> dict[str, float]:
    """`val_accuracy` and `val_loss` of `model` on the run's validation split (none without
    `data.val_fraction`)."""
    batches = data.validation_batches(batch_size)
    if not batches:
        return {}
    result = evaluate_batches(model, data.dataset, batches)
    return {"val_accuracy": result["accuracy"], "val_loss": result["loss"]}


class Evaluation(Callback):
    """The engine's evaluation, a callback: after every `eval.every` rounds and the last, the
    global model's test accuracy and loss (and on the validation split where the run has one),
    with `eval.personal` (or clients of several architectures) the clients' personal accuracy,
    with `eval.davies_bouldin` the features' separability (FLea, Fig. 3), and after a completed
    run `eval.context_attack` (FLea's context-identification attack, Fig. 9(d)). It comes
    first, so the other callbacks see its record."""

    def __init__(self) -> None:
        self._personal_splits: Any = None

    def on_begin(self, sim: "Simulation") -> None:
        """With `eval.davies_bouldin`, each client of a round's first phase is measured after
        its step too (by the executor, where the client ran). The clients' personal test
        splits are drawn here, before round 0, so that a client with none is refused first."""
        sim.measure_local = sim.config.eval.davies_bouldin and has_features(sim.worker)
        if sim.config.eval.personal or sim.architectures.models is not None:
            self._personal_splits = personal_test_splits(
                np.asarray(sim.data.partition.class_counts),
                sim.data.dataset.y_test,
                sim.config.eval.personal_size,
                sim.config.seed,
            )

    def measure(self, sim: "Simulation") -> Measure | None:
        rounds, cfg = sim.rounds_completed, sim.config
        if rounds % cfg.eval.every == 0 or rounds == cfg.rounds:
            return partial(self.measures, sim)
        return None

    def measures(self, sim: "Simulation") -> dict[str, Any]:
        """The global model's measures after round `sim.rounds_completed`. A non-finite test
        loss stops the run as diverged."""
        cfg = sim.config.eval
        model = sim.strategy.global_model()
        result = evaluate(model, sim.data.dataset, cfg.batch_size, cfg.per_class)
        if not math.isfinite(result["loss"]):
            raise NonFiniteLossError(
                f"the global model's test loss after round {sim.rounds_completed} is "
                f"{result['loss']} (accuracy {result['accuracy']:.2f}%): its weights hold NaN "
                f"or infinite values, so the run diverged; look for a non-finite or extreme "
                f"strategy parameter, or lower train.lr"
            )
        result.update(validation_metrics(sim.data, model, cfg.batch_size))
        if cfg.personal or sim.architectures.models is not None:
            result.update(self._personal_metrics(sim))
        model = sim.strategy.global_model()
        if cfg.davies_bouldin and has_features(model):
            dataset = sim.data.dataset
            test = penultimate(model, dataset.x_test, dataset.prepare)
            result["test_davies_bouldin"] = davies_bouldin(test, dataset.y_test)
        return result

    def _personal_metrics(self, sim: "Simulation") -> dict[str, float]:
        states, arches = sim.client_states, sim.architectures.models
        names = None if arches is None else [arches.name_of(k) for k in range(sim.data.num_clients)]
        return personal_metrics(
            self._personal_splits,
            sim.data.dataset,
            lambda k: sim.strategy.personal_model(k, states.checkout(k, sim.device)),
            names,
        )

    def on_complete(self, sim: "Simulation") -> dict[str, Any]:
        """`eval.context_attack` on what the finished run shared (for `summary.json`)."""
        sizes = sim.config.eval.context_attack
        if not sizes or not sim.executor.writes:
            return {}
        view = sim.strategy.context_view()
        if view is None:
            return {}
        return run_attack_summary(view, sim.data.dataset, sizes, sim.config.seed)
