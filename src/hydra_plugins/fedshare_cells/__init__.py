"""fedshare's cell sweeper: a multirun over an explicit list of jobs (fedshare.reproduce).

Hydra's basic sweeper runs the cartesian product of swept values; a paper table's cells are a
list of override sets that differ in their keys (one method adds `strategy.mu=...`, another
`model.batchnorm=true`). This sweeper reads that list from a JSON file and hands it to the
configured launcher unchanged (basic, joblib, submitit), so every cell is an ordinary job of
`python -m fedshare.run -m`:

    python -m fedshare.run -m hydra/sweeper=fedshare_cells hydra.sweeper.cells_file=cells.json \
        hydra/launcher=joblib hydra.launcher.n_jobs=2 progress=false

`cells.json` is a list of override lists; each job runs the command line's overrides followed
by its own.
"""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


@dataclass
class CellSweeperConf:
    _target_: str = "hydra_plugins.fedshare_cells.CellSweeper"
    cells_file: str = "???"
    """A JSON file: a list of jobs, each a list of overrides."""


ConfigStore.instance().store(
    group="hydra/sweeper", name="fedshare_cells", node=CellSweeperConf, provider="fedshare"
)


class CellSweeper(Sweeper):
    """Launches the jobs listed in `cells_file`, each after the command line's overrides."""

    def __init__(self, cells_file: str) -> None:
        self.cells_file = Path(cells_file)
        self.launcher: Any = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: list[str]) -> Any:
        cells = json.loads(self.cells_file.read_text())
        if not isinstance(cells, list) or not all(isinstance(c, list) for c in cells):
            raise ValueError(f"{self.cells_file} must hold a list of override lists")
        return self.launcher.launch([[*arguments, *cell] for cell in cells], initial_job_idx=0)
