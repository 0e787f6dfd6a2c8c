"""Grouping loaded runs into method × setting rows, and the notes on how they were grouped.

The method is the run's strategy; the setting is its data, partition and model plus every
config key that differs between runs which share those four (a sweep over `train.lr` or
`strategy.mu` gives a row per value; `strategy.*` keys go with the method). Keys that only
record how a run was executed (`EXECUTION_KEYS`) never split rows; the seeds of a row are its
repetitions.
"""

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fedshare.errors import FedshareError

BASE_KEYS = ("data", "partition", "model")
"""Setting keys every row has (read from summary.json)."""
EXECUTION_KEYS = frozenset(
    {
        "seed",
        "run_dir",
        "progress",
        "device",
        "resume",
        "overwrite",
        "checkpoint.every",
        "eval.batch_size",
        "data.root",
        "data.download",
        "data.cache",
    }
)
"""Config keys that never split rows: the seed and how a run was executed, not what it ran."""
MISSING = "—"
"""How a missing value is shown."""
ABSENT = object()
"""`run_value` of a key the run's config does not have."""
_NAMED = ("strategy", *BASE_KEYS)
"""Keys whose value is a name, read from summary.json."""


# ---------------------------------------------------------------------------- config values
def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested config → `{"train.lr": 0.05, ...}` (lists stay values)."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def _flat(run: dict[str, Any]) -> dict[str, Any]:
    if "_flat" not in run:
        run["_flat"] = flatten(run["config"])
    return run["_flat"]


def run_value(run: dict[str, Any], key: str) -> Any:
    """A run's value of `key`: strategy/data/partition/model from summary.json (the names a
    run was started with), any other key from its config (`ABSENT` if it has none)."""
    if key in _NAMED:
        value = run["summary"].get(key)
        if value is None:
            node = run["config"].get(key)
            value = node.get("name") if isinstance(node, Mapping) else node
        return value
    return _flat(run).get(key, ABSENT)


def canon(value: Any) -> str:
    """A hashable, order-stable text of a config value."""
    return "<absent>" if value is ABSENT else json.dumps(value, sort_keys=True, default=str)


def show(value: Any) -> str:
    """A config value as table text (`MISSING` for none)."""
    if value is ABSENT or value is None:
        return MISSING
    if isinstance(value, str):
        return value
    return json.dumps(value, default=str)


def listed(items: Sequence[str], limit: int = 8) -> str:
    """`items` joined by commas, the first `limit` of them and how many more."""
    shown = ", ".join(items[:limit])
    return shown + (f", … ({len(items) - limit} more)" if len(items) > limit else "")


def _is_base(key: str) -> bool:
    return key in _NAMED or key in {f"{k}.name" for k in _NAMED}


def _config_keys(runs: Sequence[dict[str, Any]]) -> list[str]:
    keys: dict[str, None] = {}
    for run in runs:
        keys.update(dict.fromkeys(_flat(run)))
    return sorted(k for k in keys if k not in EXECUTION_KEYS and not _is_base(k))


def _varies(runs: Sequence[dict[str, Any]], key: str) -> bool:
    return len({canon(run_value(run, key)) for run in runs}) > 1


def _buckets(runs: Sequence[dict[str, Any]], keys: Sequence[str]) -> dict[tuple, list[dict]]:
    buckets: dict[tuple, list[dict]] = defaultdict(list)
    for run in runs:
        buckets[tuple(canon(run_value(run, k)) for k in keys)].append(run)
    return buckets


def split_keys(runs: Sequence[dict[str, Any]]) -> list[str]:
    """The config keys that take several values among runs of the same strategy, data,
    partition and model: those that, besides the seed, tell runs of one setting apart."""
    base = _buckets(runs, _NAMED).values()
    return [k for k in _config_keys(runs) if any(_varies(members, k) for members in base)]


# ---------------------------------------------------------------------------- groups
@dataclass
class Group:
    """The runs of one method × setting (normally its seeds)."""

    strategy: str
    method: str
    setting: dict[str, Any]
    runs: list[dict[str, Any]]

    @property
    def setting_label(self) -> str:
        return self.label(list(self.setting))

    def label(self, keys: Sequence[str]) -> str:
        """The setting as text, of `keys` only: `digits/iid/cnn_small train.lr=0.1`."""
        base = "/".join(show(self.setting[k]) for k in BASE_KEYS if k in keys)
        extra = [f"{k}={show(self.setting[k])}" for k in keys if k not in BASE_KEYS]
        return " ".join(p for p in [base, *extra] if p) or "all"

    @property
    def seeds(self) -> list[Any]:
        return [run["summary"].get("seed", run["config"].get("seed")) for run in self.runs]


def _sort_key(value: Any) -> tuple:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (0, float(value), "")
    return (1, 0.0, show(value))


def group_runs(runs: Sequence[dict[str, Any]], by: Sequence[str] | None = None) -> list[Group]:
    """Group loaded runs by method × setting.

    `by=None`: the setting is data/partition/model plus `split_keys(runs)`. Otherwise `by` names
    the keys to group by (data, partition, model or dotted config keys such as `train.lr`);
    runs that differ in anything else are pooled. Keys under `strategy.` join the method's
    name (`fedprox mu=0.1`), the others form the setting. Sorted by setting, then method."""
    if by is None:
        keys = [*BASE_KEYS, *split_keys(runs)]
    else:
        known = set(_config_keys(runs)) | set(BASE_KEYS)
        keys = []
        for key in by:
            if key in ("strategy", "method", "strategy.name"):
                continue
            if key not in known:
                raise FedshareError(
                    f"no run has a config key {key!r} to group by; use data, partition, model "
                    f"or a dotted key of config.yaml such as train.lr"
                )
            keys.append(key)
    method_keys = [k for k in keys if k.startswith("strategy.")]
    setting_keys = [k for k in keys if not k.startswith("strategy.")]
    groups = []
    for members in _buckets(runs, ["strategy", *keys]).values():
        first = members[0]
        strategy = str(run_value(first, "strategy"))
        params = [
            f"{k.removeprefix('strategy.')}={show(run_value(first, k))}"
            for k in method_keys
            if run_value(first, k) is not ABSENT
        ]
        groups.append(
            Group(
                strategy=strategy,
                method=" ".join([strategy, *params]),
                setting={k: run_value(first, k) for k in setting_keys},
                runs=list(members),
            )
        )
    groups.sort(
        key=lambda g: (
            [_sort_key(v) for v in g.setting.values()],
            g.strategy,
            [_sort_key(run_value(g.runs[0], k)) for k in method_keys],
        )
    )
    return groups


def notes_on(groups: Sequence[Group]) -> list[str]:
    """What a reader should know about the grouping: pooled keys, fixed-per-row keys, repeated
    seeds, runs that did not complete."""
    runs = [run for g in groups for run in g.runs]
    notes = []
    pooled, fixed = [], []
    used = {k for g in groups for k in g.setting}
    for key in [*BASE_KEYS, *_config_keys(runs)]:
        if key in used or key.startswith("strategy."):
            continue
        if any(_varies(g.runs, key) for g in groups):
            pooled.append(key)
        elif _varies(runs, key):
            fixed.append(key)
    if pooled:
        notes.append(f"pooled over different values of: {listed(pooled)}")
    if fixed:
        notes.append(f"fixed within each row but different between rows: {listed(fixed)}")
    for g in groups:
        label = f"{g.method} on {g.setting_label}"
        repeated = sorted({str(s) for s in g.seeds if g.seeds.count(s) > 1})
        if repeated:
            notes.append(f"{label}: seed(s) {', '.join(repeated)} appear more than once")
        unfinished = [r["summary"].get("status") for r in g.runs]
        unfinished = [s for s in unfinished if s not in (None, "completed")]
        if unfinished:
            notes.append(
                f"{label}: {len(unfinished)} of {len(g.runs)} runs "
                f"{', '.join(sorted(set(unfinished)))}"
            )
    return notes
