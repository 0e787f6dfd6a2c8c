"""The command line: `python -m fedshare.run strategy=... data=... partition=... model=...`.

Hydra composes the config from the groups in `configs/`; this module turns it into objects,
runs the simulation and writes the run directory (DESIGN.md's contract).
"""

import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from fedshare.config import RunConfig
from fedshare.errors import FedshareError, choices_message


def config_dir() -> Path:
    """`fedshare/configs` inside a built wheel, else the repository's top-level `configs/`."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "configs", here.parents[1] / "configs"):
        if (candidate / "config.yaml").exists():
            return candidate
    raise FileNotFoundError(f"fedshare's Hydra configs are missing (looked in {here})")


ConfigStore.instance().store(name="fedshare_schema", node=RunConfig)


def group_params(node: Any) -> tuple[str, dict[str, Any]]:
    """(name, other keys) of a config group node such as `strategy` or `model`."""
    values = dict(OmegaConf.to_container(node, resolve=True)) if node is not None else {}
    name = values.pop("name", None)
    if not name:
        raise FedshareError("every strategy/data/partition/model config needs a 'name' key")
    return str(name), values


def execute(cfg: DictConfig, output_dir: Path, choices: dict[str, str]) -> dict[str, Any]:
    """Build everything from a composed config, run it, and return the summary."""
    from fedshare.api import init_model
    from fedshare.data import federate, load_dataset, plot_partition
    from fedshare.engine.simulation import Simulation
    from fedshare.results.rundir import RunDirectory
    from fedshare.strategies import make_strategy

    run: RunConfig = OmegaConf.to_object(cfg)  # type: ignore[assignment]
    data_cfg = OmegaConf.to_container(cfg.data, resolve=True)
    dataset = load_dataset(data_cfg, seed=run.seed)  # type: ignore[arg-type]
    partition_cfg = OmegaConf.to_container(cfg.partition, resolve=True)
    fed = federate(
        dataset,
        partition_cfg,
        run.clients.num,
        run.seed,  # type: ignore[arg-type]
        run.clients.samples_per_client,
    )
    model_name, model_params = group_params(cfg.model)
    if model_name == "auto":
        model_name = dataset.default_model
    model = init_model(model_name, fed, run.seed, model_params)
    strategy_name, strategy_params = group_params(cfg.strategy)
    strategy = make_strategy(strategy_name, strategy_params)

    directory = RunDirectory(output_dir)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    resolved["model"]["name"] = model_name  # type: ignore[index]
    directory.write_config(resolved)  # type: ignore[arg-type]
    meta = {
        "strategy": strategy_name,
        "data": dataset.name,
        "partition": choices.get("partition", fed.partition.name),
        "model": model_name,
    }
    sim = Simulation(strategy, fed, model, run, output_dir, meta)
    plot_partition(fed.partition, output_dir / "partition.png")
    result = sim.run(resume=run.resume)
    return result.summary


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="config")
def _main(cfg: DictConfig) -> float | None:
    hydra_cfg = HydraConfig.get()
    output_dir = Path(hydra_cfg.runtime.output_dir)
    choices = {k: v for k, v in hydra_cfg.runtime.choices.items() if isinstance(v, str)}
    try:
        summary = execute(cfg, output_dir, choices)
    except FedshareError as err:
        print(f"fedshare: error: {err}", file=sys.stderr)
        sys.exit(2)
    print(
        f"{summary['strategy']} on {summary['data']}/{summary['partition']}: "
        f"final {summary['final_accuracy']:.2f}%  best {summary['best_accuracy']:.2f}%  "
        f"({summary['rounds_completed']} rounds, {summary['wall_time_s']:.1f}s) -> {output_dir}"
    )
    return summary["best_accuracy"]


GROUPS = ("strategy", "data", "partition", "model", "experiment")


def check_group_choices(argv: list[str]) -> None:
    """Reject an unknown `group=option` before Hydra does, in one sentence."""
    root = config_dir()
    for arg in argv:
        key, sep, value = arg.lstrip("+~").partition("=")
        if not sep or key not in GROUPS or "," in value or value in ("null", ""):
            continue
        if not (root / key / f"{value}.yaml").exists():
            options = sorted(
                str(p.relative_to(root / key).with_suffix("")) for p in (root / key).rglob("*.yaml")
            )
            raise FedshareError(choices_message(key, value, options))


def main() -> None:
    try:
        check_group_choices(sys.argv[1:])
    except FedshareError as err:
        print(f"fedshare: error: {err}", file=sys.stderr)
        sys.exit(2)
    _main()


if __name__ == "__main__":
    main()
