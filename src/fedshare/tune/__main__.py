"""`python -m fedshare.tune strategy=fedprox data=digits partition=dir0.1 rounds=5 trials=8`

Tunes the strategy's search space (`configs/tune/<strategy>.yaml` over `configs/tune/default.yaml`)
on the validation split of the tuning seed (`seed=`, default 0), then reruns the chosen values
on the test seeds. Its own keys: `trials=N` (required), `test_seeds=[1,2,3]` (`[]`: no rerun),
`out=<folder>` (default `tuning/<strategy>-<data>-<partition>`), `space=<file>` (another search
space); every other argument is the runs' (as `python -m fedshare.run` takes it). Writes
`<out>/tuned.yaml` (for `tuned=<file>`), `<out>/trials.json` and `<out>/test/seed<s>/`.
"""

import sys
from pathlib import Path

from fedshare.errors import FedshareError, exit_user_error
from fedshare.tune.study import TuneRequest, rerun_on_test_seeds, run_study, setting_value

OWN_KEYS = ("trials", "test_seeds", "out", "space")
MAX_TRIALS = 10_000


def parse_trials(value: str | None) -> int:
    """`trials=N` as a positive integer, else one sentence."""
    if value is None:
        raise FedshareError(
            "trials=N is missing: say how many runs the tuning may spend, e.g. trials=8"
        )
    try:
        trials = int(value)
    except ValueError:
        trials = 0
    if not 1 <= trials <= MAX_TRIALS or str(trials) != value.strip():
        raise FedshareError(
            f"trials={value} is not valid: the number of tuning runs is an integer from 1 to "
            f"{MAX_TRIALS}, e.g. trials=8"
        )
    return trials


def parse_seeds(value: str | None) -> list[int]:
    """`test_seeds=[1,2,3]` (or one seed) as a list of non-negative integers."""
    if value is None:
        return [1, 2, 3]
    items = [v.strip() for v in value.strip().strip("[]").split(",") if v.strip()]
    if not all(v.isdigit() for v in items):
        raise FedshareError(
            f"test_seeds={value} is not valid: give a list of non-negative integers, e.g. "
            f"test_seeds=[1,2,3] (or [] for no rerun)"
        )
    return [int(v) for v in items]


def parse_request(argv: list[str]) -> TuneRequest:
    """The tuning's own keys and the runs' arguments of a command line."""
    own = [a for a in argv if a.split("=", 1)[0] in OWN_KEYS]
    runs = [a for a in argv if a not in own]
    strategy = setting_value(runs, "strategy") or "fedavg"
    setting = "-".join(
        str(setting_value(runs, key) or default)
        for key, default in (("data", "digits"), ("partition", "iid"))
    )
    out = setting_value(own, "out") or f"tuning/{strategy}-{setting}"
    space = setting_value(own, "space")
    return TuneRequest(
        args=runs,
        trials=parse_trials(setting_value(own, "trials")),
        out=Path(out),
        test_seeds=parse_seeds(setting_value(own, "test_seeds")),
        space_file=Path(space) if space else None,
    )


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    try:
        from fedshare.config.compose import check_command_line
        from fedshare.config.overrides import check_overrides
        from fedshare.run import config_dir

        request = parse_request(args)
        check_overrides(request.args, config_dir())
        check_command_line(request.args, config_dir())
        tuned, trials = run_study(request)
        print(f"tuned {len(trials)} trials -> {tuned}")
        rerun_on_test_seeds(request, tuned)
    except FedshareError as err:
        exit_user_error(str(err))


if __name__ == "__main__":
    main()
