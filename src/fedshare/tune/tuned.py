"""The tuned file: what `python -m fedshare.tune` chose, and how, for a run to apply.

    python -m fedshare.run tuned=tuning/fedprox-digits-dir0.1/tuned.yaml seed=1

(a relative path that is not there is looked for in `configs/tune/`, where the tuned files of
docs/tuning.md's comparison are)

puts the file's `overrides` (the strategy, the chosen values, the validation split) before the
command line's own (so a typed key still wins), `config.yaml` records `tuned: <file>` and
`summary.json` records the file's `tuned` block (objective, trials, rounds, sampler, space).
"""

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from fedshare.errors import FedshareError
from fedshare.results.atomic import atomic_write

HEADER = "# Written by python -m fedshare.tune (docs/tuning.md); a run takes it as tuned=<file>.\n"


def write_tuned(path: Path, overrides: Sequence[str], how: Mapping[str, Any]) -> None:
    """Write the tuned file: the run overrides and how they were found."""
    text = HEADER + yaml.safe_dump(
        {"overrides": list(overrides), "tuned": dict(how)}, sort_keys=False, width=100
    )
    atomic_write(path, lambda tmp: tmp.write_text(text))


def tuned_file(path: str | Path, configs: Path | None = None) -> Path:
    """`path` as given, or else inside `<configs>/tune/` (where the stored comparison's tuned
    files are: `tuned=tuned/digits_pat2/fedprox.yaml`; `configs`: fedshare's config folder)."""
    file = Path(path)
    if configs is None or file.is_file() or file.is_absolute():
        return file
    shipped = configs / "tune" / file
    return shipped if shipped.is_file() else file


def read_tuned(path: str | Path, configs: Path | None = None) -> dict[str, Any]:
    """A tuned file's content, checked: `overrides` (a list of key=value) and `tuned`."""
    file = tuned_file(path, configs)
    if not file.is_file():
        raise FedshareError(
            f"tuned={path}: no such file; give a file that python -m fedshare.tune wrote"
        )
    try:
        content = yaml.safe_load(file.read_text())
    except yaml.YAMLError as err:
        raise FedshareError(f"tuned={path} is not YAML: {str(err).splitlines()[0]}") from None
    overrides = content.get("overrides") if isinstance(content, Mapping) else None
    if (
        not isinstance(overrides, list)
        or not all(isinstance(o, str) and "=" in o for o in overrides)
        or not isinstance(content.get("tuned"), Mapping)
    ):
        raise FedshareError(
            f"tuned={path} is not a tuned file: it needs `overrides` (a list of key=value) and a "
            f"`tuned` block, as python -m fedshare.tune writes them"
        )
    return dict(content)


def tuned_paths(args: Sequence[str]) -> list[str]:
    """The values of the `tuned=` arguments of a command line."""
    return [a.split("=", 1)[1] for a in args if a.startswith("tuned=")]


def expand_tuned(args: Sequence[str], configs: Path | None = None) -> list[str]:
    """The command line with the tuned file's overrides after its leading flags (`-m`) and
    before its other arguments (unchanged without `tuned=`); a strategy on the command line
    must be the file's."""
    paths = tuned_paths(args)
    if not paths:
        return list(args)
    if len(paths) > 1 or "," in paths[0]:
        raise FedshareError(
            f"tuned={','.join(paths)}: a run takes one tuned file (sweep over them with a loop)"
        )
    overrides = read_tuned(paths[0], configs)["overrides"]
    theirs = [o.split("=", 1)[1] for o in overrides if o.startswith("strategy=")]
    ours = [a.split("=", 1)[1] for a in args if a.startswith("strategy=")]
    if theirs and ours and ours[-1] != theirs[-1]:
        raise FedshareError(
            f"strategy={ours[-1]} but tuned={paths[0]} was tuned for strategy={theirs[-1]}; "
            f"leave strategy= out or use that strategy's tuned file"
        )
    flags = next((i for i, a in enumerate(args) if not a.startswith("-")), len(args))
    return [*args[:flags], *overrides, *args[flags:]]


def apply_tuned(cfg: Any, typed: Sequence[str], configs: Path | None = None) -> None:
    """Set in the composed config `cfg` each value of its `tuned` file that the run's own
    overrides `typed` leave unset: how a sweep's member (a `reproduce` cell) gets the values,
    where `expand_tuned` never saw its overrides. A key the member typed keeps its value, so a
    single run, whose command line `expand_tuned` already extended, is unchanged by it."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    if not cfg.get("tuned"):
        return
    path = str(cfg.tuned)
    own = {str(o).lstrip("+").split("=", 1)[0] for o in typed}
    overrides = read_tuned(path, configs)["overrides"]
    for item in OverridesParser.create().parse_overrides(overrides):
        key = item.key_or_group
        if key == "strategy":
            if cfg.strategy.name != item.value():
                raise FedshareError(
                    f"strategy={cfg.strategy.name} but tuned={path} was tuned for "
                    f"strategy={item.value()}; give that strategy or its tuned file"
                )
        elif key not in own:
            OmegaConf.update(cfg, key, item.value(), merge=True)


def tuned_record(path: str | None, configs: Path | None = None) -> dict[str, Any]:
    """`summary.json`'s record of a tuned run: `{"tuned": {file, overrides, how}}` ({} if none)."""
    if not path:
        return {}
    content = read_tuned(path, configs)
    return {"tuned": {"file": str(path), "overrides": content["overrides"], **content["tuned"]}}
