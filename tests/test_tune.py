"""`python -m fedshare.tune`: Optuna trials on the validation split only (the test split is
never read), seeded, a tuned run beating a bad default on validation, and the tuned file that
a run applies (`tuned=<file>`) and records."""

import json
from pathlib import Path

import pytest
import torch
import yaml

import fedshare.data
from fedshare.errors import FedshareError
from fedshare.tune.__main__ import main, parse_request, parse_trials
from fedshare.tune.space import load_space
from fedshare.tune.study import TuneRequest, run_member, run_study, validation_as_test
from fedshare.tune.tuned import expand_tuned, write_tuned

SETTING = ["data=digits", "model=linear", "clients.num=3", "rounds=1", "train.momentum=0"]
"""One round of a linear model on digits: a trial takes a second or two."""


class Unreadable(torch.Tensor):
    """A tensor any torch operation on which fails: the test split during tuning."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        raise AssertionError(f"the test split was read ({getattr(func, '__name__', func)})")


def with_unreadable_test_split(monkeypatch):
    load = fedshare.data.load_dataset

    def loading(cfg, seed=0):
        dataset = load(cfg, seed)
        dataset.x_test = dataset.x_test.as_subclass(Unreadable)
        dataset.y_test = dataset.y_test.as_subclass(Unreadable)
        return dataset

    monkeypatch.setattr(fedshare.data, "load_dataset", loading)


def lr_space(tmp_path: Path) -> Path:
    space = tmp_path / "space.yaml"
    space.write_text("train.lr: {low: 0.05, high: 0.5, log: true}\n")
    return space


def test_trials_never_read_the_test_split_and_repeat_exactly(tmp_path, monkeypatch):
    with_unreadable_test_split(monkeypatch)
    args = ["strategy=fedprox", *SETTING]
    with pytest.raises(AssertionError, match="the test split was read"):
        run_member([*args, "data.val_fraction=0.2", f"run_dir={tmp_path / 'r'}"], None)
    first = run_study(TuneRequest(args, 2, tmp_path / "a"), log=lambda _: None)[1]
    again = run_study(TuneRequest(args, 2, tmp_path / "b"), log=lambda _: None)[1]
    assert first == again  # the same command gives the same trials and scores
    assert len(first) == 2 and first[1]["values"] != first[0]["values"]
    assert first[0]["values"] == {"train.lr": 0.05, "strategy.mu": 0.01}  # trial 0: the defaults
    other = run_study(TuneRequest([*args, "seed=1"], 2, tmp_path / "c"), log=lambda _: None)[1]
    assert other[1]["values"] != first[1]["values"]  # the sampler follows the seed


def test_a_tuned_run_beats_a_deliberately_bad_default_on_validation(tmp_path):
    args = ["strategy=fedavg", *SETTING, "train.lr=0.0001", "seed=3"]
    request = TuneRequest(args, 3, tmp_path / "out", space_file=lr_space(tmp_path))
    tuned_file, trials = run_study(request, log=lambda _: None)
    bad = run_member(
        [*args, "data.val_fraction=0.1", f"run_dir={tmp_path / 'bad'}"], None, validation_as_test
    ).summary["best_accuracy"]
    chosen = [*args[:-2], "seed=3", f"tuned={tuned_file}", f"run_dir={tmp_path / 't'}"]
    assert "train.lr=0.0001" not in chosen
    tuned = run_member(chosen, None, validation_as_test).summary["best_accuracy"]
    assert tuned == max(t["best_val_accuracy"] for t in trials)
    assert tuned > bad + 20  # lr 1e-4 barely moves a linear model in one round


def test_a_run_applies_and_records_the_tuned_file(tmp_path):
    tuned_file = tmp_path / "tuned.yaml"
    how = {"objective": "best validation accuracy", "trials": 4, "rounds": 1}
    write_tuned(tuned_file, ["strategy=fedprox", "strategy.mu=0.25", "data.val_fraction=0.2"], how)
    out = tmp_path / "run"
    result = run_member([*SETTING, f"tuned={tuned_file}", f"run_dir={out}"], out)
    assert result.strategy.mu == 0.25
    config = yaml.safe_load((out / "config.yaml").read_text())
    summary = json.loads((out / "summary.json").read_text())
    assert config["tuned"] == str(tuned_file) and config["strategy"]["mu"] == 0.25
    assert config["data"]["val_fraction"] == 0.2
    assert summary["tuned"]["file"] == str(tuned_file) and summary["tuned"]["trials"] == 4
    assert summary["tuned"]["overrides"][1] == "strategy.mu=0.25"
    assert "test_at_best_val_accuracy" in summary


def test_the_command_line_wins_over_the_tuned_file_and_keeps_its_strategy(tmp_path):
    tuned_file = tmp_path / "tuned.yaml"
    write_tuned(tuned_file, ["strategy=fedprox", "strategy.mu=0.25"], {"trials": 2})
    args = [f"tuned={tuned_file}", "strategy.mu=0.5"]
    assert expand_tuned(args) == ["strategy=fedprox", "strategy.mu=0.25", *args]
    assert expand_tuned(["-m", *args])[:2] == ["-m", "strategy=fedprox"]
    with pytest.raises(FedshareError, match=r"strategy=fedavg but tuned=.* strategy=fedprox"):
        expand_tuned([f"tuned={tuned_file}", "strategy=fedavg"])
    with pytest.raises(FedshareError, match="no such file"):
        expand_tuned([f"tuned={tmp_path / 'missing.yaml'}"])
    (tmp_path / "other.yaml").write_text("a: 1\n")
    with pytest.raises(FedshareError, match="is not a tuned file"):
        expand_tuned([f"tuned={tmp_path / 'other.yaml'}"])


@pytest.mark.parametrize("value", ["0", "-2", "1.5", "many", ""])
def test_bad_trials_exit_2_with_one_sentence(value, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["strategy=fedavg", f"trials={value}"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"trials={value} is not valid" in err[0]


def test_missing_trials_and_bad_seeds_are_refused():
    with pytest.raises(FedshareError, match="trials=N is missing"):
        parse_trials(None)
    with pytest.raises(FedshareError, match=r"test_seeds=\[a\] is not valid"):
        parse_request(["trials=2", "test_seeds=[a]"])
    request = parse_request(["strategy=fedprox", "partition=dir0.1", "trials=2", "test_seeds=[4]"])
    assert request.trials == 2 and request.test_seeds == [4]
    assert request.out == Path("tuning/fedprox-digits-dir0.1")
    assert request.args == ["strategy=fedprox", "partition=dir0.1"]


def test_tuning_without_a_validation_split_is_refused(tmp_path):
    with pytest.raises(FedshareError, match=r"data.val_fraction=0: tuning .* needs a fraction"):
        run_study(TuneRequest([*SETTING, "data.val_fraction=0"], 1, tmp_path), log=print)


def test_every_space_file_loads_on_top_of_the_learning_rate_rule():
    from fedshare.run import config_dir
    from fedshare.tune.space import parse_range

    folder = config_dir() / "tune"
    for file in folder.glob("*.yaml"):
        space = {r.key: r for r in load_space(folder, file.stem)}
        assert "train.lr" in space
        assert file.read_text().startswith("#")  # each file names its ranges' source
    prox = {r.key: r for r in load_space(folder, "fedprox")}
    assert (prox["strategy.mu"].low, prox["strategy.mu"].high) == (0.001, 1.0)
    assert prox["train.lr"].times_default
    with pytest.raises(FedshareError, match="needs numbers low < high"):
        parse_range("train.lr", {"low": 1, "high": 0.1}, "x.yaml")


SPACE_FILES = sorted(
    f.stem
    for f in (Path(__file__).parents[1] / "configs" / "tune").glob("*.yaml")
    if f.stem != "default"
)


@pytest.mark.parametrize("strategy", SPACE_FILES)
def test_each_search_space_names_real_parameters_with_the_defaults_inside(strategy):
    """Every key a strategy's space declares is a parameter of that strategy (or of the training
    recipe) that takes a value from the range, and the default lies inside it (trial 0)."""
    import math

    from fedshare.run import config_dir
    from fedshare.strategies import make_strategy
    from fedshare.tune.study import defaults_of

    space = load_space(config_dir() / "tune", strategy)
    defaults = defaults_of([f"strategy={strategy}", "data=digits"], space)
    for r in space:
        assert defaults[r.key] is not None, f"{strategy}: {r.key} is no key of the run"
        assert r.sampled_default(defaults[r.key]) is not None, (
            f"{strategy}: default {r.key}={defaults[r.key]} outside {r.as_dict()}"
        )
        group, _, name = r.key.partition(".")
        if group == "strategy":
            inside = math.sqrt(r.low * r.high) if r.log else (r.low + r.high) / 2
            assert getattr(make_strategy(strategy, {name: inside}), name) == inside


def test_a_relative_tuned_path_is_also_looked_for_in_the_configs():
    from fedshare.run import config_dir
    from fedshare.tune.tuned import read_tuned, tuned_file

    stored = sorted((config_dir() / "tune" / "tuned").rglob("*.yaml"))
    assert stored, "the tuned comparison's files are stored in configs/tune/tuned/"
    relative = stored[0].relative_to(config_dir() / "tune")
    assert tuned_file(relative, config_dir()) == stored[0]
    assert read_tuned(relative, config_dir())["tuned"]["budget_rounds"] > 0
    assert tuned_file("nowhere.yaml", config_dir()) == Path("nowhere.yaml")
    assert tuned_file(relative) == relative  # without the config folder: the path as given


def test_a_sweep_member_gets_the_tuned_values_it_does_not_type(tmp_path):
    from omegaconf import OmegaConf

    from fedshare.tune.tuned import apply_tuned

    tuned = tmp_path / "tuned.yaml"
    write_tuned(tuned, ["strategy=fedprox", "strategy.mu=0.25", "train.lr=0.2"], {"trials": 2})
    cfg = OmegaConf.create(
        {"tuned": str(tuned), "strategy": {"name": "fedprox", "mu": 0.01}, "train": {"lr": None}}
    )
    apply_tuned(cfg, ["strategy=fedprox", f"tuned={tuned}", "train.lr=0.3"])
    assert cfg.strategy.mu == 0.25 and cfg.train.lr is None  # the member's own lr is kept
    cfg.strategy.name = "fedavg"
    with pytest.raises(FedshareError, match="strategy=fedavg but tuned="):
        apply_tuned(cfg, [])


def test_the_tuned_comparison_tunes_every_method_with_one_budget_on_its_own_setting():
    """tuning/comparison: each `<m>_tuned` row's stored file was tuned with the same trials ×
    rounds on the column's setting over the space configs/tune/ declares today, and each row
    has its defaults (`<m>`, same validation split) beside it."""
    from fedshare.reproduce.jobs import cells
    from fedshare.run import config_dir
    from fedshare.tune.tuned import read_tuned, tuned_paths

    found = cells("tuning/comparison", "digits", seeds=[1])
    tuned = {c.method: c for c in found if tuned_paths(c.overrides)}
    assert len(tuned) >= 4
    assert {m.removesuffix("_tuned") for m in tuned} <= {c.method for c in found}
    budgets = set()
    for method, cell in tuned.items():
        strategy = method.removesuffix("_tuned")
        (path,) = tuned_paths(cell.overrides)
        content = read_tuned(path, config_dir())
        how = content["tuned"]
        budgets.add((how["trials"], how["rounds"], how["budget_rounds"], how["seed"]))
        setting = [
            o for o in cell.overrides if o.split("=")[0] not in ("strategy", "tuned", "seed")
        ]
        assert how["command"] == [f"strategy={strategy}", *setting], method
        space = {r.key: r.as_dict() for r in load_space(config_dir() / "tune", strategy)}
        assert how["space"] == space, method
        assert f"strategy={strategy}" in content["overrides"]
        assert "data.val_fraction=0.1" in content["overrides"]
    assert len(budgets) == 1, budgets
    trials, rounds, _, seed = budgets.pop()
    assert trials >= 8 and f"rounds={rounds}" in cell.overrides and seed not in (1, 2, 3)
