"""The name a run's partition goes by in the run line, the run folder and `summary.json`.

A partition is named by its config choice (`partition=dir0.1`). A parameter the command line
sets to another value than the choice's config file holds is appended as `+<key><value>`
(`partition=dir0.1 partition.alpha=0.05` -> `dir0.1+alpha0.05`), so two runs on different
partitions never share a name. The label is a plain folder name and a value the command line
can take back (`run_dir=runs/fedavg-digits-dir0.1+alpha0.05/...`): no `=`, `,` or spaces.
A preset's own partition settings (`experiment=...`) are part of the preset and not appended.
A validation split (`data.val_fraction=0.1`) takes samples from every client, so it is part of
the partition's name too: `+val0.1`.
"""

import re
from collections.abc import Iterable, Mapping
from typing import Any

UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
"""Characters a label does not carry (each run of them becomes one `-`)."""


def shown(value: Any) -> str:
    """A parameter value in a label: numbers as typed, lists joined by `-`, true/false."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list | tuple):
        return "-".join(shown(v) for v in value)
    if isinstance(value, Mapping):
        return "-".join(f"{k}-{shown(v)}" for k, v in value.items())
    return "null" if value is None else str(value)


def set_keys(overrides: Iterable[str], group: str = "partition") -> list[str]:
    """The parameters of `group` the command line sets (`partition.alpha=0.05`, with or
    without `+`/`++`), in the order given."""
    keys = []
    for override in overrides:
        key = override.lstrip("+").split("=", 1)[0]
        if key.startswith(f"{group}.") and key.count(".") == 1:
            keys.append(key.split(".", 1)[1])
    return keys


def partition_label(
    choice: str, values: Mapping[str, Any], preset: Mapping[str, Any], overrides: Iterable[str]
) -> str:
    """`choice`, plus `+<key><value>` for each partition parameter in `overrides` (the command
    line) whose value in `values` (the run's partition config) differs from `preset` (the
    choice's config file)."""
    changed = [
        f"+{UNSAFE.sub('-', key + shown(values[key]))}"
        for key in dict.fromkeys(set_keys(overrides))
        if key in values and (key not in preset or preset[key] != values[key])
    ]
    return choice + "".join(changed)


def with_validation(label: str, val_fraction: Any) -> str:
    """`label` with `+val<fraction>` when the run holds a validation split out (fraction > 0)."""
    if not val_fraction:
        return label
    return f"{label}+{UNSAFE.sub('-', 'val' + shown(val_fraction))}"
