"""Where the one-shot baselines' local heads go: to a server, or straight to the last client.

FedPFT's Table 2 is two-client decentralized FL: the source sends its head once to the
destination, which combines it with its own, and the paper counts that one transfer
(FedPFT's Sections 4.2 and 5.3). With `to_last_client=true` the sources send their heads (and their
sample counts, for a weighted mean) as peer messages (`Update.to_peers`: `bytes_peer`), the
last client combines what it received with its own head, and nothing goes to a server or back
(no final download: the result lives on the last client). The destination's heads reach the
evaluation as `Update.audit` (simulation bookkeeping, not traffic).
"""

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch

from fedshare.config.rules import ANY, ruled
from fedshare.engine.client import Client
from fedshare.engine.messages import Message, Update
from fedshare.errors import FedshareError
from fedshare.strategies.base import SetupContext


@dataclass
class HeadExchange:
    """Mixin for strategies whose clients each send one head vector."""

    to_last_client: bool = ruled(
        False,
        ANY,
        source="rule: off, the server-mediated exchange of FedPFT §5.1's one-shot baselines; true "
        "is Table 2's direct transfer",
    )
    """Sources send their heads straight to the last client (Table 2's source → destination)
    instead of uploading them to a server."""

    @property
    def clients_in_order(self) -> bool:
        """The last client combines the heads the others sent it in the same round."""
        return self.to_last_client

    def check_topology(self, ctx: SetupContext) -> None:
        """Sending to the last client needs every client in the one round."""
        clients, n = ctx.config.clients, ctx.data.num_clients
        if self.to_last_client and (clients.fraction < 1.0 or clients.per_round not in (None, n)):
            raise FedshareError(
                f"strategy.to_last_client=true sends every head to client {n - 1} in one round; "
                f"set clients.fraction=1 (got {clients.fraction}) and clients.per_round=null"
            )

    def head_update(self, client: Client, vector: torch.Tensor) -> Update:
        """The client's step once its head is trained: upload it, or send it on."""
        if not self.to_last_client:
            return Update(client.id, client.num_samples, weights=vector)
        # a mixin: `num_clients` is the Strategy's (`client_setup`), which mypy cannot see here
        last = self.num_clients - 1  # type: ignore[attr-defined]
        if client.id != last:
            count = torch.tensor([client.num_samples], device=vector.device)
            sent = Message(weights=vector, payload={"num_samples": count})
            return Update(client.id, client.num_samples, to_peers={last: sent})
        heads = [(m.weights, float(m.payload["num_samples"])) for m in client.inbox]
        heads.append((vector, float(client.num_samples)))
        return Update(client.id, client.num_samples, audit={"heads": heads})

    @staticmethod
    def heads_of(updates: Iterable[Update]) -> Iterator[tuple[torch.Tensor, float]]:
        """(head vector, sample-count weight) of every head the combination uses."""
        for update in updates:
            if update.weights is not None:
                yield update.weights, update.aggregation_weight
            yield from update.audit.get("heads", [])

    def final_download(self) -> Message | None:
        if self.to_last_client:
            return None  # the combined head is on the last client already
        # a mixin: the next class in the strategy's MRO is the Strategy, unknown to mypy here
        return super().final_download()  # type: ignore[misc]
