"""One training recipe per comparison (issue 46 §1): within a column of a reproduce job, every
method resolves the same optimizer, lr, momentum, local epochs and batch size (after the
strategies' own `train_defaults` and the dataset's recipe), unless the job names the method
in `recipe_exceptions` with the reason its paper fixes another; and every scale states the
recipe its generated table's caption prints."""

from collections import defaultdict
from dataclasses import replace

import pytest

from fedshare.config.compose import compose_member, plain_dict
from fedshare.config.defaults import resolve_train
from fedshare.reproduce.__main__ import recipe_caption
from fedshare.reproduce.jobs import Cell, available_jobs, cells, load_job
from fedshare.run import config_dir
from fedshare.strategies.base import STRATEGIES

RECIPE_KEYS = ("optimizer", "lr", "momentum", "local_epochs", "batch_size")
SCALES = [(job, scale) for job in available_jobs() for scale in load_job(job).scales]


def recipe(cell: Cell) -> tuple:
    """The training recipe `python -m fedshare.run` would resolve for the cell."""
    cfg = compose_member(list(cell.overrides), str(config_dir()))
    train = resolve_train(plain_dict(cfg.train), STRATEGIES.get(cfg.strategy.name), cfg.data.name)
    return tuple(getattr(train, key) for key in RECIPE_KEYS)


def recipe_conflicts(job: str, scale: str) -> list[str]:
    """Columns whose methods (the declared exceptions aside) resolve different recipes, and
    declared exceptions that resolve the common recipe after all."""
    spec = load_job(job).scale(scale)
    by_column: dict[str, dict[str, tuple]] = defaultdict(dict)
    for cell in cells(job, scale, seeds=[0]):
        by_column[cell.column][cell.method] = recipe(cell)
    problems = []
    for column, methods in by_column.items():
        common = {m: r for m, r in methods.items() if m not in spec.recipe_exceptions}
        if len(set(common.values())) > 1:
            shown = {m: dict(zip(RECIPE_KEYS, r, strict=True)) for m, r in common.items()}
            problems.append(f"{column}: methods resolve different recipes {shown}")
        same = [m for m in spec.recipe_exceptions if methods.get(m) in set(common.values())]
        if same:
            problems.append(f"{column}: {same} are declared exceptions but train the same")
    return problems


@pytest.mark.parametrize(("job", "scale"), SCALES, ids=[f"{j}:{s}" for j, s in SCALES])
def test_scale_states_its_recipe_in_the_caption(job: str, scale: str) -> None:
    spec = load_job(job).scale(scale)
    assert spec.recipe, f"{job} scale {scale}: no `recipe` (top level or the scale's)"
    assert set(spec.recipe_exceptions) <= {c.method for c in cells(job, scale, seeds=[0])}
    assert recipe_caption(spec).startswith(f"Training recipe: {spec.recipe}")


@pytest.mark.slow
@pytest.mark.parametrize(("job", "scale"), SCALES, ids=[f"{j}:{s}" for j, s in SCALES])
def test_every_method_of_a_column_trains_under_one_recipe(job: str, scale: str) -> None:
    assert recipe_conflicts(job, scale) == []


@pytest.mark.parametrize(("job", "scale"), [("fedaa/table3", "cpu"), ("fedpft/table5", "frontier")])
def test_one_recipe_check_on_two_jobs(job: str, scale: str) -> None:
    """The default tier's share of the check above: a stand-in with its ablations, and the
    job with declared exceptions."""
    assert recipe_conflicts(job, scale) == []


def test_an_undeclared_recipe_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    """A frontier without its declared exceptions: the multi-round methods' 10 local epochs
    differ from the one-shot methods' 60."""
    job = load_job("fedpft/table5")
    undeclared = replace(job.scale("frontier"), recipe_exceptions={})
    monkeypatch.setitem(job.scales, "frontier", undeclared)  # type: ignore[arg-type]
    problems = recipe_conflicts("fedpft/table5", "frontier")
    assert len(problems) == 1 and "'local_epochs': 10" in problems[0]
