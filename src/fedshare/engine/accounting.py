"""Byte accounting of everything that crosses the network."""

from dataclasses import asdict, dataclass

import torch


def tensor_bytes(t: torch.Tensor | None) -> int:
    return 0 if t is None else t.numel() * t.element_size()


def payload_bytes(payload: dict[str, torch.Tensor]) -> int:
    return sum(tensor_bytes(t) for t in payload.values())


def message_bytes(weights: torch.Tensor | None, payload: dict[str, torch.Tensor]) -> int:
    """Bytes of one message: its weights and its payload."""
    return tensor_bytes(weights) + payload_bytes(payload)


@dataclass
class Traffic:
    """Running totals. `bytes_shared` counts only non-weight payloads, in both directions."""

    bytes_up: int = 0
    bytes_down: int = 0
    bytes_shared: int = 0
    bytes_down_personal: int = 0
    """The part of `bytes_down` addressed to single clients (counted once per receiver)."""
    bytes_peer: int = 0
    """Client-to-client messages (`Update.to_peers`), counted once per hop and in neither
    `bytes_up` nor `bytes_down` (no server relays them); their payloads count in
    `bytes_shared` too."""

    def sent_down(
        self, weights: torch.Tensor | None, payload: dict[str, torch.Tensor], receivers: int
    ) -> None:
        extra = payload_bytes(payload)
        self.bytes_down += (tensor_bytes(weights) + extra) * receivers
        self.bytes_shared += extra * receivers

    def sent_personal(self, weights: torch.Tensor | None, payload: dict[str, torch.Tensor]) -> None:
        """A message to one client."""
        self.sent_down(weights, payload, 1)
        self.bytes_down_personal += message_bytes(weights, payload)

    def sent_up(self, weights: torch.Tensor | None, payload: dict[str, torch.Tensor]) -> None:
        extra = payload_bytes(payload)
        self.bytes_up += tensor_bytes(weights) + extra
        self.bytes_shared += extra

    def sent_peer(self, weights: torch.Tensor | None, payload: dict[str, torch.Tensor]) -> None:
        extra = payload_bytes(payload)
        self.bytes_peer += tensor_bytes(weights) + extra
        self.bytes_shared += extra

    def as_dict(self) -> dict[str, int]:
        return asdict(self)
