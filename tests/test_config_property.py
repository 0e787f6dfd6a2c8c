"""Property: random values for any config keys are either accepted or refused with one
sentence (a FedshareError, exit 2 from the command line, no folder) — never a traceback or a
hang. The default tier checks and builds each drawn run in-process without training, on the
same examples every run (the `deterministic` Hypothesis profile of conftest.py, and pinned
examples that once failed); the slow tier searches new random examples each run and runs a
few through the command line."""

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from fedshare.config import DataOptions, RunConfig
from fedshare.config.compose import check_command_line, compose_member
from fedshare.config.validation import typed_fields
from fedshare.errors import FedshareError
from fedshare.run import build_simulation, config_dir
from test_cli import fedshare_run
from test_validation import override

KEYS = sorted(typed_fields(RunConfig)) + sorted(f"data.{k}" for k in typed_fields(DataOptions))
KEYS = [k for k in KEYS if k not in ("strategy", "data", "partition", "model", "data.name")]
KEYS = [k for k in KEYS if k not in ("resume", "overwrite", "run_dir", "data.root")]
"""Every typed key, but the ones that pick the folder or the data location (tested on their
own) and the group choices (drawn below from their options)."""

NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, 2, -1, 2**64, 10**12]),
    st.floats(allow_nan=True, allow_infinity=True, width=64),
)
SCALARS = st.one_of(NUMBERS, st.booleans(), st.none(), st.sampled_from(["abc", "", "auto"]))
VALUES = st.one_of(SCALARS, st.lists(NUMBERS, max_size=3))
CHOICES = {
    "strategy": ["fedavg", "fedprox", "flea", "fedpft"],
    "partition": ["iid", "dir0.1", "pat2"],
    "model": ["auto", "mlp", "cnn_small"],
}


@st.composite
def drawn_args(draw: Any) -> list[str]:
    keys = draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=3, unique=True))
    args = [("++" if k.startswith("data.") else "") + override(k, draw(VALUES)) for k in keys]
    for group, options in CHOICES.items():
        if draw(st.booleans()):
            args.append(f"{group}={draw(st.sampled_from(options))}")
    return args


def accepted_or_refused_in_one_sentence(args: list[str], run_dir: Path) -> None:
    """Check and build the run of `args` in-process: it builds, or a one-line FedshareError."""
    root = str(config_dir())
    try:
        check_command_line(args, config_dir())
        cfg = compose_member(args, root)
        cfg.run_dir = str(run_dir)
        build_simulation(cfg, Path(cfg.run_dir), {"partition": "iid"})
    except FedshareError as err:
        assert "\n" not in str(err), args
        assert str(err).strip(), args
    else:
        assert OmegaConf.select(cfg, "strategy.name")


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(args=drawn_args())
@example(args=["logger=1"])  # once a TypeError in the trackers; now refused in one sentence
def test_random_values_are_accepted_or_refused_in_one_sentence(tmp_path_factory, args):
    accepted_or_refused_in_one_sentence(args, tmp_path_factory.mktemp("run"))


@pytest.mark.slow
@settings(
    max_examples=300, derandomize=False, deadline=None, suppress_health_check=list(HealthCheck)
)
@given(args=drawn_args())
def test_random_search_accepted_or_refused_in_one_sentence(tmp_path_factory, args):
    """The same property on new random examples each run (the default tier's are fixed)."""
    accepted_or_refused_in_one_sentence(args, tmp_path_factory.mktemp("run"))


@pytest.mark.slow
@settings(max_examples=8, derandomize=False, deadline=None, suppress_health_check=list(HealthCheck))
@given(args=drawn_args())
def test_random_values_on_the_command_line_exit_0_or_2_with_no_folder(tmp_path_factory, args):
    tmp = tmp_path_factory.mktemp("cli")
    out = tmp / "run"
    fast = ["progress=false", "rounds=1", "clients.num=2", "data.train_subset=100"]
    proc = fedshare_run(*fast, *args, f"run_dir={out}", cwd=tmp)
    assert proc.returncode in (0, 2), (args, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr, args
    if proc.returncode == 2:
        assert len(proc.stderr.strip().splitlines()) == 1, (args, proc.stderr)
        assert not out.exists(), args
    else:
        assert json.loads((out / "summary.json").read_text())["status"] == "completed"
