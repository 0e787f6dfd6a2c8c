"""Loading pretrained weights safely: find the file, check its hash, unpickle tensors only.

Files are loaded with `torch.load(..., weights_only=True)`, which also reads the legacy
(pre-1.6, non-zip) format through torch's restricted unpickler: only tensors and plain
containers come back, never arbitrary objects. Nothing is ever downloaded.

A model another codebase pickled whole (`torch.save(model)`, as the FLea authors' repository
saves its server models) is read by `load_pickled_module_state` without that codebase: its own
classes come back as empty `nn.Module` stand-ins that keep their submodules, parameters and
buffers; PyTorch's layers and tensors load as themselves; any other global is refused.
`positional_rename` then maps its state-dict names onto a fedshare model's, entry by entry.
"""

import hashlib
import pickle
import re
import types
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from fedshare.errors import FedshareError

HUB_HASH = re.compile(r"-([0-9a-f]{8,64})\.[A-Za-z0-9]+$")


def resolve_weights(model: str, spec: bool | str, relative: str, data_root: str | None) -> Path:
    """The weights file for `model`: `spec` is a file, a folder holding `relative`, or True.

    True looks for `<root>/<relative>` in the data roots the datasets use: `data_root` alone
    when it is given, else $FEDSHARE_DATA, then the default cache.
    """
    from fedshare.data.sources import data_roots

    if spec is True:
        candidates = [base / relative for base in data_roots(data_root)]
    else:
        path = Path(str(spec)).expanduser()
        candidates = [path / relative if path.is_dir() else path]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    looked = ", ".join(str(c) for c in candidates)
    raise FedshareError(
        f"pretrained weights for model {model!r} not found (looked for {looked}); pass the "
        f"file's path, or put it at <data root>/{relative} and point data.root or "
        f"$FEDSHARE_DATA at that root"
    )


def check_hub_hash(path: Path) -> None:
    """If the file name carries a torch.hub-style hash (`name-<sha256 prefix>.ext`), check it."""
    match = HUB_HASH.search(path.name)
    if not match:
        return
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if not digest.startswith(match.group(1)):
        raise FedshareError(
            f"weights file {path} is corrupt or not what its name says: sha256 {digest[:16]}... "
            f"does not start with {match.group(1)}"
        )


def load_state_file(path: Path) -> dict[str, torch.Tensor]:
    """A state dict from a checkpoint file, unwrapped from {'state_dict': ...} and from
    `nn.DataParallel`'s `module.` prefix."""
    check_hub_hash(path)
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises several types here
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise FedshareError(
            f"cannot load weights file {path} safely (tensors only): {reason}"
        ) from None
    for key in ("state_dict", "model"):
        if isinstance(obj, Mapping) and isinstance(obj.get(key), Mapping):
            obj = obj[key]
    if not isinstance(obj, Mapping) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise FedshareError(f"weights file {path} does not hold a state dict of tensors")
    return {k.removeprefix("module."): v for k, v in obj.items()}


def load_into(
    model: nn.Module,
    state: Mapping[str, torch.Tensor],
    path: Path,
    rename: Callable[[str], str] = lambda key: key,
    skip: Callable[[str], bool] = lambda key: False,
) -> None:
    """Strictly load `state` (keys mapped by `rename`) into `model`.

    Keys for which `skip` is true (e.g. a classifier head of another size) are left at their
    initial values; BatchNorm `num_batches_tracked` counters missing from old checkpoints are
    kept as they are. Any other missing or unexpected key is an error.
    """
    own = model.state_dict()
    mapped = {rename(k): v for k, v in state.items()}
    mapped = {k: v for k, v in mapped.items() if not skip(k)}
    for key, value in own.items():
        if key not in mapped and (skip(key) or key.endswith("num_batches_tracked")):
            mapped[key] = value
    missing = sorted(set(own) - set(mapped))
    unexpected = sorted(set(mapped) - set(own))
    wrong = sorted(k for k in set(own) & set(mapped) if own[k].shape != mapped[k].shape)
    if missing or unexpected or wrong:
        parts = [
            f"{label} {', '.join(keys[:4])}{' ...' if len(keys) > 4 else ''}"
            for label, keys in (
                ("missing", missing),
                ("unexpected", unexpected),
                ("wrong shape", wrong),
            )
            if keys
        ]
        raise FedshareError(f"weights file {path} does not fit the model: {'; '.join(parts)}")
    model.load_state_dict(mapped, strict=True)


# Globals a whole pickled PyTorch model needs besides its own classes and torch's layers.
PLAIN_GLOBALS = {
    ("collections", "OrderedDict"),
    ("builtins", "set"),
    ("__builtin__", "set"),
}


class _ForeignModule(nn.Module):
    """Stand-in for a class of a codebase that is not installed: only its state is kept."""


def _restricted_unpickler(packages: tuple[str, ...]) -> type[pickle.Unpickler]:
    class Unpickler(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            if module.split(".")[0] in packages:
                return type(name, (_ForeignModule,), {"__module__": module})
            if (module, name) in PLAIN_GLOBALS or (
                module == "torch._utils" and name.startswith("_rebuild_")
            ):
                return super().find_class(module, name)
            if module.startswith("torch.nn.modules."):
                found = super().find_class(module, name)
                if isinstance(found, type) and issubclass(found, nn.Module):
                    return found
            raise pickle.UnpicklingError(
                f"{module}.{name} is neither a PyTorch layer nor a class of {', '.join(packages)}"
            )

    return Unpickler


def load_pickled_module_state(path: Path, packages: Sequence[str]) -> dict[str, torch.Tensor]:
    """The state dict of a model pickled whole by a codebase whose top-level packages are
    `packages` (e.g. ("FLAlgorithms",)), read without that codebase and without running its
    code."""
    module = types.SimpleNamespace(
        Unpickler=_restricted_unpickler(tuple(packages)), load=pickle.load, __name__="pickle"
    )
    try:
        obj = torch.load(path, map_location="cpu", pickle_module=module, weights_only=False)
    except Exception as err:  # torch and pickle raise several types here
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise FedshareError(f"cannot read {path} as a pickled model: {reason}") from None
    if not isinstance(obj, nn.Module):
        raise FedshareError(f"{path} holds a {type(obj).__name__}, not a pickled model")
    return obj.state_dict()


def positional_rename(state: Mapping[str, torch.Tensor], model: nn.Module) -> dict[str, str]:
    """{name in `state`: name in `model`'s state dict at the same position}, for a model of the
    same architecture whose layers are named differently (`load_into` checks the shapes)."""
    own = list(model.state_dict())
    if len(own) != len(state):
        raise FedshareError(
            f"the checkpoint has {len(state)} entries and the model {len(own)}: not the same "
            "architecture"
        )
    return dict(zip(state, own, strict=True))
