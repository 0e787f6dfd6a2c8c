"""The local optimizer a strategy's update equations assume, checked before round 0."""

from fedshare.config import TrainConfig
from fedshare.errors import FedshareError


def require_sgd(
    train: TrainConfig, strategy: str, momentum_free: bool, why: str, instead: str = ""
) -> None:
    """Refuse, in one sentence, a `train.optimizer` other than SGD (and, with `momentum_free`,
    SGD with momentum): `why` says which equation needs it, `instead` offers an alternative."""
    if train.optimizer == "sgd" and (train.momentum == 0 or not momentum_free):
        return
    need = "train.optimizer=sgd train.momentum=0" if momentum_free else "train.optimizer=sgd"
    raise FedshareError(
        f"strategy {strategy} needs {need}, but the run has train.optimizer={train.optimizer} "
        f"train.momentum={train.momentum} ({why}); set {need}" + (f" {instead}" if instead else "")
    )
