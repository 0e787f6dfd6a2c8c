"""The command line: `python -m fedshare.run strategy=... data=... partition=... model=...`.

Hydra composes the config from the groups in `configs/` (once per run); this module checks
it, turns it into objects (the strategy built once, by the check), runs the simulation and
writes the run directory (docs/run-folders.md, docs/configuration.md).
"""

import contextlib
import os
import secrets
import signal
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

import hydra
from hydra._internal.hydra import Hydra
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from fedshare.config import RunConfig
from fedshare.config.compose import (
    check_command_line,
    check_config,
    check_named_folder,
    command_line_runs,
    composition_error,
    plain_dict,
)
from fedshare.config.overrides import check_overrides
from fedshare.config.resume import resumed_config
from fedshare.errors import FedshareError, RankFailure, error_sentence, exit_user_error
from fedshare.results.labels import partition_label, with_validation
from fedshare.results.rundir import LOCK_FILE, MARKER
from fedshare.sweep import SOME_MEMBERS_FAILED, SweepOutcome, record_failure
from fedshare.tune.tuned import apply_tuned, expand_tuned, tuned_record

if TYPE_CHECKING:
    from collections.abc import Callable

    from fedshare.data.federated import FederatedData
    from fedshare.engine.distributed import RankGroup
    from fedshare.engine.simulation import Simulation
    from fedshare.strategies.base import Strategy

INTERRUPTED = 130


def config_dir() -> Path:
    """`fedshare/configs` inside a built wheel, else the repository's top-level `configs/`."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "configs", here.parents[1] / "configs"):
        if (candidate / "config.yaml").exists():
            return candidate
    raise FileNotFoundError(f"fedshare's Hydra configs are missing (looked in {here})")


ConfigStore.instance().store(name="fedshare_schema", node=RunConfig)


_hydra_get_mode = Hydra.get_mode


def mode_from_flags(self: Hydra, config_name: str | None, overrides: list[str]) -> Any:
    """Replaces Hydra's `get_mode`, which composes the whole config once more only to read
    `hydra.mode`. fedshare's configs never set it (a sweep is `-m`; tests/test_cli.py checks
    the configs), and for such a config Hydra takes the mode from the command line's `-m`
    when `get_mode` says None: the same mode, and one run is composed once (tests/test_cli.py
    counts the compositions). A command line that sets `hydra.mode` gets Hydra's own answer."""
    if any(o.lstrip("+~").startswith("hydra.mode") for o in overrides):
        return _hydra_get_mode(self, config_name, overrides)
    return None


Hydra.get_mode = mode_from_flags  # type: ignore[method-assign]
# A per-process token in default run folder names: two runs started in the same second get
# different folders (the run folder's lock refuses a second writer in any case).
OmegaConf.register_new_resolver("fedshare.token", lambda: secrets.token_hex(3), use_cache=True)


def run_partition_label(partition: Any, val_fraction: Any = 0.0) -> str:
    """The partition's name in the run line, the run folder and `summary.json`: its config
    choice with the command line's changes to its parameters and its validation split
    (`fedshare.results.labels`)."""
    hydra_cfg = HydraConfig.get()
    choice = str(hydra_cfg.runtime.choices.get("partition"))
    file = config_dir() / "partition" / f"{choice}.yaml"
    preset = OmegaConf.to_container(OmegaConf.load(file)) if file.exists() else {}
    values = OmegaConf.to_container(partition, resolve=True)
    label = partition_label(choice, values, preset, hydra_cfg.overrides.task)  # type: ignore[arg-type]
    return with_validation(label, val_fraction)


def partition_resolver(_root_: DictConfig) -> str:
    """`${fedshare.partition:}` in the default run folder (configs/config.yaml)."""
    return run_partition_label(_root_.partition, _root_.data.get("val_fraction"))


OmegaConf.register_new_resolver("fedshare.partition", partition_resolver)


def group_params(node: Any) -> tuple[str, dict[str, Any]]:
    """(name, other keys) of a config group node such as `strategy` or `model`."""
    values = plain_dict(node) if node is not None else {}
    name = values.pop("name", None)
    if not name:
        raise FedshareError("every strategy/data/partition/model config needs a 'name' key")
    return str(name), values


def simulation_settings(run: RunConfig) -> dict[str, Any]:
    """Every `SimulationConfig` key as the run set it, except `rounds` and `train`, which
    `fedshare.config.assemble` resolves from the layered defaults."""
    from dataclasses import fields

    from fedshare.config import SimulationConfig

    return {
        f.name: getattr(run, f.name)
        for f in fields(SimulationConfig)
        if f.name not in ("rounds", "train")
    }


def build_simulation(
    cfg: DictConfig,
    output_dir: Path | None,
    choices: dict[str, str],
    group: "RankGroup | None" = None,
    strategy: "Strategy | None" = None,
    data_view: "Callable[[FederatedData], FederatedData] | None" = None,
) -> "Simulation":
    """Every object of the run, with nothing written yet: the data and the partition, then
    `fedshare.config.assemble` (the path `fedshare.simulate` takes too) for the model and the
    layered defaults (`group`: this process's place in a run across several). `strategy` is
    the one the run's check built (`execute`); without it, it is built here. `data_view`:
    what the run sees of the federated data (the tuning's validation split in place of the
    test split)."""
    from dataclasses import asdict

    from fedshare.config.assemble import assemble
    from fedshare.data import federate, load_dataset
    from fedshare.engine.distributed import local_device
    from fedshare.strategies import make_strategy
    from fedshare.tracking import make_loggers

    run: RunConfig = OmegaConf.to_object(cfg)  # type: ignore[assignment]
    if strategy is None:
        strategy = make_strategy(*group_params(cfg.strategy))
    loggers = make_loggers(run.logger)
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
    if data_view is not None:
        fed = data_view(fed)
    model_name, model_params = group_params(cfg.model)
    settings = simulation_settings(run)
    if group is not None:
        settings["device"] = local_device(run.device, group.local_rank)
    record = plain_dict(cfg)
    sim = assemble(
        strategy,
        fed,
        model_name,
        rounds=run.rounds,
        train=asdict(run.train),
        **settings,
        model_params=model_params,
        partition=choices.get("partition"),
        run_dir=output_dir,
        record=record,
        callbacks=list(loggers),
        overwrite=run.overwrite,
        group=group,
    )
    sim.meta.update(tuned_record(run.tuned, config_dir()))
    return sim


def execute(cfg: DictConfig, output_dir: Path, choices: dict[str, str]) -> dict[str, Any]:
    """Check, build and run a composed config into `output_dir`; return the summary. Under
    torchrun (or `workers=K`) every process joins the run's group and writes into rank 0's
    folder."""
    from fedshare.engine.distributed import RankGroup, launched, local_device

    strategy = check_config(cfg)
    if not launched():
        if cfg.workers != 1:
            raise FedshareError(
                f"workers={cfg.workers}: several processes start from the command line "
                f"(python -m fedshare.run workers=K ..., or torchrun), not inside a sweep's "
                f"member; valid here: workers=1"
            )
        sim = build_simulation(cfg, output_dir, choices, strategy=strategy)
        return sim.run(resume=bool(cfg.resume)).summary
    group = RankGroup.join(local_device(cfg.device, int(os.environ.get("LOCAL_RANK", "0"))))
    try:
        if cfg.workers not in (1, group.world):
            raise FedshareError(
                f"workers={cfg.workers} but torchrun started {group.world} processes; leave "
                f"workers out under torchrun"
            )
        shared_dir = Path(group.from_writer(lambda: str(output_dir)))
        if shared_dir != output_dir:  # this rank's own folder name: Hydra made it, unused
            discard_if_unused(output_dir)
        sim = build_simulation(cfg, shared_dir, choices, group, strategy)
        return sim.run(resume=bool(cfg.resume)).summary
    finally:
        group.close()


def discard_if_unused(folder: Path) -> None:
    """Remove the folder Hydra made for a run that stopped before writing anything."""
    if folder.is_dir() and {p.name for p in folder.iterdir()} <= {LOCK_FILE, MARKER}:
        for name in (LOCK_FILE, MARKER):
            (folder / name).unlink(missing_ok=True)
        folder.rmdir()
        cwd = Path.cwd().resolve()
        for parent in folder.resolve().parents:  # runs/<setting>/ made for this run alone
            if parent == cwd or cwd not in parent.parents:
                break
            with contextlib.suppress(OSError):
                parent.rmdir()


fail = exit_user_error


def member_meta(cfg: DictConfig, choices: dict[str, str]) -> dict[str, Any]:
    """What a failed sweep member's summary records of its config: the four choices and seed."""
    names = {
        group: OmegaConf.select(cfg, f"{group}.name", default=None) or choices.get(group)
        for group in ("strategy", "data", "model")
    }
    return {**names, "partition": choices.get("partition"), "seed": cfg.get("seed")}


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="config")
def _main(cfg: DictConfig) -> float | None:
    hydra_cfg = HydraConfig.get()
    output_dir = Path(hydra_cfg.runtime.output_dir)
    choices = {k: v for k, v in hydra_cfg.runtime.choices.items() if isinstance(v, str)}
    in_sweep = hydra_cfg.mode == RunMode.MULTIRUN
    try:
        apply_tuned(cfg, hydra_cfg.overrides.task, config_dir())  # a sweep member's tuned file
        choices["partition"] = run_partition_label(cfg.partition, cfg.data.get("val_fraction"))
        overrides = [*hydra_cfg.overrides.task, *hydra_cfg.overrides.hydra]
        if cfg.resume and not (in_sweep or names_run_dir(overrides)):
            raise FedshareError(
                "resume=true needs run_dir=<the folder of the run to resume> (or hydra.run.dir=)"
            )
        if cfg.resume and not in_sweep:
            cfg, label = resumed_config(cfg, hydra_cfg.overrides.task, output_dir)
            choices["partition"] = label or str(cfg.partition.name)
        summary = execute(cfg, output_dir, choices)
    except FedshareError as err:
        if not in_sweep:
            discard_if_unused(output_dir)
            fail(str(err))
        record_failure(output_dir, member_meta(cfg, choices), str(err))
        print(f"fedshare: error: {err} ({output_dir})", file=sys.stderr)
        return None
    except RankFailure as err:
        discard_if_unused(output_dir)
        print(
            f"fedshare: error: {err}; what was written stays in {output_dir}: continue with "
            f"run_dir={output_dir} resume=true",
            file=sys.stderr,
        )
        sys.exit(1)
    except KeyboardInterrupt as stop:
        discard_if_unused(output_dir)
        if os.environ.get("RANK", "0") == "0":  # one message for all the run's processes
            print(
                f"fedshare: interrupted ({str(stop) or 'SIGINT'}); what was written stays in "
                f"{output_dir}: continue with run_dir={output_dir} resume=true",
                file=sys.stderr,
            )
        sys.exit(INTERRUPTED)
    except Exception as err:
        if not in_sweep:
            raise  # a crash: its traceback, and summary.json says "failed" with the error
        record_failure(output_dir, member_meta(cfg, choices), error_sentence(err))
        traceback.print_exc()
        return None
    if os.environ.get("RANK", "0") != "0":
        return summary["best_accuracy"]
    if summary.get("nothing_to_do"):
        print(
            f"{output_dir} holds this run finished ({summary['rounds_completed']} rounds): "
            f"nothing to do, its files are unchanged (rounds=<more> continues it)"
        )
        return summary["best_accuracy"]
    source = f" (data: {summary['data_source']})" if summary.get("data_source") else ""
    from fedshare.engine.memory import command_seconds

    total = command_seconds()
    with_start = "" if total is None else f", {total:.1f} s since the command started"
    print(
        f"{summary['strategy']} on {summary['data']}/{summary['partition']}{source}: "
        f"final {summary['final_accuracy']:.2f}%  best {summary['best_accuracy']:.2f}%  "
        f"({summary['rounds_completed']} rounds: {summary['wall_time_s']:.1f} s of rounds"
        f"{with_start}) -> {output_dir}"
    )
    return summary["best_accuracy"]


def names_run_dir(overrides: Any) -> bool:
    """Whether the command line names the run folder (`run_dir=` or `hydra.run.dir=`)."""
    return any(str(o).startswith(("run_dir=", "hydra.run.dir=")) for o in overrides)


def interrupt_on_sigterm() -> None:
    """SIGTERM (a cluster's time limit) stops the run as Ctrl-C does: summary.json says
    "interrupted" and the latest checkpoint stays for `resume=true`. SIGINT gets Python's
    KeyboardInterrupt handler even where the process inherited it ignored (a background job of
    a script, a parent that set SIG_IGN), so Ctrl-C or `kill -INT` always stops the run."""

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt("SIGTERM")

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def report_sweep() -> None:
    """After a sweep: name the members that failed, and exit with `SOME_MEMBERS_FAILED`."""
    failed = SweepOutcome.failed
    if failed:
        print(
            f"fedshare: {len(failed)} of {SweepOutcome.members} sweep members failed, the "
            f"others finished: {'; '.join(failed)}",
            file=sys.stderr,
        )
        sys.exit(SOME_MEMBERS_FAILED)


HELP_FLAGS = {"-h", "--help", "--hydra-help", "--info", "-c", "--cfg"}
"""Hydra's options that print and run nothing: no check of the values, so `--help` stays fast
(checking a group's keys imports the registries, and with them torch)."""


def main() -> None:
    """Check the command line, then let Hydra compose and run it. One run is composed once, by
    Hydra, and checked inside (`execute`) before anything is written; a sweep's members are
    each composed and checked here first, so that one bad member stops the sweep before any
    starts (docs/configuration.md). A `tuned=` file's values go first (`expand_tuned`)."""
    try:
        sys.argv[1:] = expand_tuned(sys.argv[1:], config_dir())
    except FedshareError as err:
        fail(str(err))
    argv = sys.argv[1:]
    sweep = bool({"-m", "--multirun"} & set(argv))
    if not HELP_FLAGS & set(argv):
        try:
            check_overrides(argv, config_dir())
            if sweep or launches(argv):  # the members, or the processes, start checked
                check_command_line(argv, config_dir())
            else:
                check_named_folder(argv)
        except FedshareError as err:
            fail(str(err))
    workers = requested_workers(argv)
    if launches(argv):
        from fedshare.engine.distributed import launch

        if sweep:
            fail(
                f"workers={workers} runs one simulation across processes; it does not combine "
                f"with --multirun (sweep with hydra/launcher=joblib or submitit instead)"
            )
        sys.exit(launch(argv, workers))
    interrupt_on_sigterm()
    if sweep:
        _main()
    else:
        run_composed(argv)
    report_sweep()


def run_composed(argv: list[str]) -> None:
    """One run: Hydra's composition error (`strategy.scal=0.2`) as one sentence, exit code 2
    (Hydra raises it to us instead of printing it: `HYDRA_FULL_ERROR`)."""
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        _main()
    except (HydraException, OmegaConfBaseException) as err:
        GlobalHydra.instance().clear()
        overrides = command_line_runs(argv)[0]
        fail(str(composition_error(err, str(config_dir()), overrides)))


def launches(argv: list[str]) -> bool:
    """Whether this command starts the processes of a `workers=K` run (not yet started by
    torch's launcher)."""
    return requested_workers(argv) > 1 and "WORLD_SIZE" not in os.environ


def requested_workers(argv: list[str]) -> int:
    """The `workers=K` of the command line (1 when absent; checked by `check_overrides`)."""
    values = [arg.split("=", 1)[1] for arg in argv if arg.startswith("workers=")]
    return int(values[-1]) if values else 1


if __name__ == "__main__":
    main()
