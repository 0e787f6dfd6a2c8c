"""Local-only training: every client trains its personal model on its own data and shares
nothing, the floor every heterogeneous-FL table reports (e.g. FedProto's "Local" row, HtFLlib's
`Local`). The loss is the cross-entropy of the personal model."""

from dataclasses import dataclass

from fedshare.engine.messages import Message
from fedshare.strategies._personal import PersonalStrategy
from fedshare.strategies.base import register_strategy


@register_strategy("local_only")
@dataclass
class LocalOnly(PersonalStrategy):
    """Personal models trained alone; nothing travels."""

    def broadcast(self, round_idx: int) -> Message:
        return Message()
