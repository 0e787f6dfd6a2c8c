"""What a run returns."""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedshare.strategies.base import Strategy


@dataclass
class RunResult:
    """What a run returns: the evaluated-round history and the summary."""

    history: list[dict[str, Any]]
    summary: dict[str, Any]
    strategy: Strategy
    run_dir: Path | None = None

    @property
    def accuracies(self) -> list[float]:
        return [r["accuracy"] for r in self.history]

    @property
    def final_accuracy(self) -> float:
        return self.summary["final_accuracy"]

    @property
    def best_accuracy(self) -> float:
        return self.summary["best_accuracy"]
