"""Equal-budget tuning on the validation split with Optuna (TPE, seeded), then the chosen
values rerun on the test seeds.

Every trial is one run of `rounds` rounds on the tuning seed with `data.val_fraction` > 0, in
which the test split is replaced by the validation split (`validation_as_test`): a trial cannot
read the test set, and what it calls accuracy is validation accuracy. The objective is the
trial's best validation accuracy over its evaluated rounds. Trial 0 runs the strategy's
defaults (where they lie in the space), so the tuned values never score below them on the
tuning seed's validation split. A method's budget is `trials` × `rounds` rounds, the same for
every method tuned with the same command-line budget.
"""

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedshare.data.federated import FederatedData
from fedshare.errors import FedshareError, NonFiniteLossError
from fedshare.tune.space import Range, load_space
from fedshare.tune.tuned import expand_tuned, write_tuned

if TYPE_CHECKING:
    from fedshare.engine.result import RunResult

DEFAULT_VAL_FRACTION = 0.1
"""`data.val_fraction` of the tuning where the command line sets none: 10 % of each client's
samples, the usual hold-out share (FedProx's and FLea's codes keep no validation set, so no
paper fixes it)."""
OBJECTIVE = "best validation accuracy (%) over the evaluated rounds"


@dataclass
class TuneRequest:
    """What `python -m fedshare.tune` was asked: the run's overrides, the trials, the test
    seeds, the output folder and optionally another search-space file."""

    args: list[str]
    trials: int
    out: Path
    test_seeds: list[int] = field(default_factory=lambda: [1, 2, 3])
    space_file: Path | None = None


def validation_as_test(data: FederatedData) -> FederatedData:
    """The run's data with its test split replaced by the validation split (and no separate
    validation split left): everything the run scores "on the test set" is validation."""
    if data.val_indices is None:
        raise FedshareError("tuning needs a validation split: set data.val_fraction > 0, e.g. 0.1")
    dataset = data.dataset
    ix = data.val_indices
    held = replace(dataset, x_test=dataset.x_train[ix], y_test=dataset.y_train[ix])
    return replace(data, dataset=held, val_indices=None)


def setting_value(args: Sequence[str], key: str) -> str | None:
    """The last value the command line gives `key` (None if it gives none)."""
    values = [a.split("=", 1)[1] for a in args if a.lstrip("+").split("=", 1)[0] == key]
    return values[-1] if values else None


def with_validation_split(args: Sequence[str]) -> list[str]:
    """`args` with `data.val_fraction=DEFAULT_VAL_FRACTION` unless they set one above 0."""
    value = setting_value(args, "data.val_fraction")
    if value is None:
        return [*args, f"data.val_fraction={DEFAULT_VAL_FRACTION}"]
    try:
        fraction = float(value)
    except ValueError:
        fraction = -1.0
    if not 0 < fraction < 1:
        raise FedshareError(
            f"data.val_fraction={value}: tuning scores trials on the validation split, so it "
            f"needs a fraction in (0, 1), e.g. {DEFAULT_VAL_FRACTION}"
        )
    return list(args)


def run_member(
    args: Sequence[str],
    run_dir: Path | None,
    data_view: Callable[[FederatedData], FederatedData] | None = None,
) -> "RunResult":
    """One run of the command line `args` (a `tuned=` file expanded) in this process, into
    `run_dir` (None: nothing written)."""
    from fedshare.config.compose import compose_member, run_values
    from fedshare.config.validation import check_run
    from fedshare.results.labels import with_validation
    from fedshare.run import build_simulation, config_dir

    args = expand_tuned(args, config_dir())
    cfg = compose_member(args, str(config_dir()))
    check_run(run_values(cfg))
    choice = setting_value(args, "partition") or str(cfg.partition.name)
    label = with_validation(choice, cfg.data.get("val_fraction"))
    sim = build_simulation(cfg, run_dir, {"partition": label}, data_view=data_view)
    return sim.run()


def defaults_of(args: Sequence[str], space: Sequence[Range]) -> dict[str, Any]:
    """Each space key's value in the run `args` describe: a strategy or data key as composed,
    a `train.` key or `rounds` as the layered defaults resolve it."""
    from dataclasses import asdict

    from omegaconf import OmegaConf

    from fedshare.config.compose import compose_member, plain_dict
    from fedshare.config.defaults import resolve_rounds, resolve_train
    from fedshare.run import config_dir
    from fedshare.strategies import make_strategy

    cfg = compose_member(list(args), str(config_dir()))
    params = plain_dict(cfg.strategy)
    strategy = make_strategy(str(params.pop("name")), params)
    train = asdict(resolve_train(plain_dict(cfg.train), strategy, str(cfg.data.name)))
    values: dict[str, Any] = {"rounds": resolve_rounds(cfg.rounds, strategy)}
    for r in space:
        group, _, name = r.key.partition(".")
        values[r.key] = train.get(name) if group == "train" else OmegaConf.select(cfg, r.key)
    return values


def shown(value: Any) -> str:
    """A value as a command-line override takes it back unchanged."""
    if isinstance(value, float):
        return repr(value)
    return json.dumps(value) if isinstance(value, str | list | dict) else str(value)


def run_study(
    request: TuneRequest,
    log: Callable[[str], None] = print,
    data_view: Callable[[FederatedData], FederatedData] = validation_as_test,
) -> tuple[Path, list[dict[str, Any]]]:
    """Run the trials; write `tuned.yaml` and `trials.json` into `request.out`; return the
    tuned file and the trials."""
    import optuna

    from fedshare.run import config_dir

    args = with_validation_split(request.args)
    base = [*args, "progress=false", "checkpoint.every=0"]
    name = str(setting_value(args, "strategy") or "fedavg")
    space = load_space(config_dir() / "tune", name, request.space_file)
    defaults = defaults_of(base, space)
    seed = int(setting_value(args, "seed") or 0)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(seed=seed)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    start = {r.key: r.sampled_default(defaults[r.key]) for r in space}
    if all(v is not None for v in start.values()):
        study.enqueue_trial(start)
    trials: list[dict[str, Any]] = []

    def objective(trial: Any) -> float:
        values = {r.key: r.value(r.suggest(trial), defaults[r.key]) for r in space}
        overrides = [f"{k}={shown(v)}" for k, v in values.items()]
        folder = request.out / "trials" / f"{trial.number:03d}"
        record: dict[str, Any] = {"number": trial.number, "values": values}
        try:
            result = run_member([*base, *overrides, f"run_dir={folder}"], None, data_view)
            value = float(result.summary["best_accuracy"])
            record.update(best_val_accuracy=value, best_val_round=best_round(result.history))
        except NonFiniteLossError:
            value, record["diverged"] = 0.0, True
        trials.append(record)
        log(f"trial {trial.number}: {' '.join(overrides)} -> validation {value:.2f}%")
        return value

    study.optimize(objective, n_trials=request.trials)
    best = study.best_trial
    chosen = {r.key: r.value(best.params[r.key], defaults[r.key]) for r in space}
    request.out.mkdir(parents=True, exist_ok=True)
    tuned_file = request.out / "tuned.yaml"
    overrides = [f"strategy={name}", *(f"{k}={shown(v)}" for k, v in chosen.items())]
    overrides.append(f"data.val_fraction={setting_value(args, 'data.val_fraction')}")
    how = {
        "objective": OBJECTIVE,
        "best_value": round(float(best.value or 0.0), 4),
        "best_trial": best.number,
        "trials": request.trials,
        "rounds": defaults["rounds"],
        "budget_rounds": request.trials * defaults["rounds"],
        "seed": seed,
        "sampler": f"optuna {optuna.__version__} TPESampler(seed={seed}), trial 0 = the defaults",
        "command": list(request.args),
        "space": {r.key: r.as_dict() for r in space},
        "defaults": {r.key: defaults[r.key] for r in space},
    }
    write_tuned(tuned_file, overrides, how)
    (request.out / "trials.json").write_text(json.dumps(trials, indent=1) + "\n")
    return tuned_file, trials


def best_round(history: Sequence[dict[str, Any]]) -> int | None:
    """The first evaluated round of a trial that reached its best (validation) accuracy."""
    scored = [r for r in history if r.get("accuracy") is not None]
    return max(scored, key=lambda r: r["accuracy"])["round"] if scored else None


def rerun_on_test_seeds(
    request: TuneRequest, tuned_file: Path, log: Callable[[str], None] = print
) -> list[dict[str, Any]]:
    """The tuned values on each test seed, as `python -m fedshare.run tuned=<file>` runs
    them (test split read, validation split kept), into `out/test/seed<s>`; the summaries.
    The tuning command's own values of the tuned keys (a default it started from) give way."""
    from fedshare.run import config_dir

    summaries = []
    chosen = {o.split("=", 1)[0] for o in expand_tuned([f"tuned={tuned_file}"], config_dir())}
    setting = [a for a in request.args if a.lstrip("+").split("=", 1)[0] not in chosen]
    for seed in request.test_seeds:
        folder = request.out / "test" / f"seed{seed}"
        args = [*setting, f"tuned={tuned_file}", f"seed={seed}", f"run_dir={folder}"]
        summary = run_member([*args, "progress=false", "overwrite=true"], folder).summary
        summaries.append(summary)
        at_best = fmt(summary.get("test_at_best_val_accuracy"))
        log(
            f"seed {seed}: test at the best-validation round {at_best}%  best test "
            f"{fmt(summary.get('best_accuracy'))}%  final test "
            f"{fmt(summary.get('final_accuracy'))}% -> {folder}"
        )
    return summaries


def fmt(value: Any) -> str:
    return "—" if value is None or not math.isfinite(value) else f"{value:.2f}"
