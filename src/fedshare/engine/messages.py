"""What crosses the network: a server-to-client `Message` and a client-to-server `Update`.

Everything sent is a tensor in one of them, so the engine counts bytes without the strategy
doing anything: `weights` count as model traffic, `payload` tensors as shared (non-weight)
traffic.
"""

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class Message:
    """Server -> client: flat global weights and/or non-weight payload tensors."""

    weights: torch.Tensor | None = None
    payload: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass
class Update:
    """Client -> server. `weight` is the aggregation weight (default: the sample count)."""

    client_id: int
    num_samples: int
    weights: torch.Tensor | None = None
    payload: dict[str, torch.Tensor] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    weight: float | None = None
    to_peers: dict[int, Message] = field(default_factory=dict)
    """Messages sent straight to other clients (a chain's next hop, a source's head to the
    destination): the engine counts them once as peer traffic, removes them from the update
    before the server sees it, and delivers each to its receiver's next step (`client.inbox`)."""
    audit: dict[str, Any] = field(default_factory=dict)
    """Ground truth the simulation records beside the upload for a privacy measurement (which
    samples a shared item came from): never sent, never counted, and never read by the
    server's algorithm, only by its metrics."""

    @property
    def aggregation_weight(self) -> float:
        return float(self.num_samples if self.weight is None else self.weight)
