"""Inspect a partition without training: `python -m fedshare.partition data=... partition=...`.

Composes the same Hydra config as `fedshare.run` (configs/config.yaml; `clients.num`,
`clients.samples_per_client`, `seed`, `data.*`, `partition.*` all apply), builds the dataset
and the partition, prints the statistics and writes `partition.json` and `partition.png` to
the output directory: `run_dir=...` if given, else
`partitions/<data>-<partition>/seed<seed>-<timestamp>`.
"""

import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from fedshare.config.overrides import check_overrides
from fedshare.errors import FedshareError, exit_user_error
from fedshare.run import config_dir

DEFAULT_DIR = (
    "partitions/${data.name}-${hydra:runtime.choices.partition}/seed${seed}-${now:%Y%m%d-%H%M%S}"
    "-${fedshare.token:}"
)


def inspect_partition(cfg: DictConfig, output_dir: Path) -> str:
    """Build the dataset and partition of `cfg`, write partition.json/.png, return the report."""
    from fedshare.config import RunConfig
    from fedshare.data import federate, load_dataset, plot_partition
    from fedshare.results.rundir import RunDirectory

    run: RunConfig = OmegaConf.to_object(cfg)  # type: ignore[assignment]
    data_cfg = OmegaConf.to_container(cfg.data, resolve=True)
    dataset = load_dataset(data_cfg, seed=run.seed)  # type: ignore[arg-type]
    partition_cfg = OmegaConf.to_container(cfg.partition, resolve=True)
    fed = federate(
        dataset,
        partition_cfg,  # type: ignore[arg-type]
        run.clients.num,
        run.seed,
        run.clients.samples_per_client,
        run.server_data.size,
        run.server_data.labelled,
        float(data_cfg.get("val_fraction") or 0.0),  # type: ignore[union-attr]
    )
    directory = RunDirectory(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    directory.write_partition(fed.partition.summary())
    png = plot_partition(fed.partition, output_dir / "partition.png")
    return (
        f"data {dataset.name}: {len(dataset.y_train)} training samples\n"
        f"{fed.partition.describe()}\n"
        f"wrote {output_dir / 'partition.json'} and {png}"
    )


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="config")
def _main(cfg: DictConfig) -> None:
    output_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        print(inspect_partition(cfg, output_dir))
    except FedshareError as err:
        exit_user_error(str(err))


def main() -> None:
    args = sys.argv[1:]
    try:
        check_overrides(args, config_dir())
    except FedshareError as err:
        exit_user_error(str(err))
    if not any(a.lstrip("+").startswith(("run_dir=", "hydra.run.dir=")) for a in args):
        sys.argv.append(f"run_dir={DEFAULT_DIR}")
    _main()


if __name__ == "__main__":
    main()
