"""Decentralized FedPFT on a chain of clients (Sec. 4.2, Fig. 3; Sec. 5.4's linear topology).

Table 2's two-client source → destination case (Sec. 5.3) is the chain of two.

There is no server. Clients 0 → 1 → … → I−1 (all clients, in id order) each send once to the
next: client 0 fits per-class mixtures on its features and sends them with the counts N^{0,c};
client i ≥ 1 draws N^{i−1,c}·`synthetic_multiplier` samples from every received mixture,
trains its own head h_i on its real features ∪ the synthetic ones, refits each class's
mixture on real ∪ synthetic and sends it with N^{i,c} = n_{i,c} + N^{i−1,c}. A class the client
does not hold is forwarded unchanged (`forward_missing`; false: refit on the synthetic
samples alone). The last client sends nothing; its head is the evaluated (global) model. With
two clients (`partition=task`, or `contiguous` over two feature files) this is Table 2's
source → destination transfer.

Simulation notes: each client sends its mixtures straight to its successor
(`Update.to_peers`: counted once per hop in `bytes_peer` and `bytes_shared`, never seen by a
server), which finds them in `client.inbox`. The clients' heads stay on the clients; the
simulation evaluates each on the test set as the chain advances (`chain_accuracy`, and
`local_accuracy` of a head on local data only with `report_local`: the heads travel in
`Update.audit`, instrumentation, not traffic). Mixture fitting,
families, K, the small-class policy and float16 are those of `fedpft`; DP is not offered here.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from fedshare.config.rules import ANY, ruled
from fedshare.engine.client import Client
from fedshare.engine.evaluation import evaluate
from fedshare.engine.rng import torch_generator
from fedshare.errors import FedshareError
from fedshare.functional.gmm import GaussianMixture, pack_mixtures, unpack_mixtures
from fedshare.strategies._feature_heads import (
    FeatureClassifier,
    client_features,
    fit_head,
    fresh_head,
    head_from_vector,
    head_vector,
    load_head,
)
from fedshare.strategies.base import Message, SetupContext, Update, register_strategy
from fedshare.strategies.fedpft import FedPFT, mixture_cost

Mixtures = list[tuple[int, int, GaussianMixture]]


@register_strategy("fedpft_chain")
@dataclass
class FedPFTChain(FedPFT):
    """FedPFT along the chain 0 → 1 → … → I−1 in one round."""

    clients_in_order = True

    forward_missing: bool = ruled(
        True,
        ANY,
        source="paper: FedPFT §4.2, each client passes the received mixtures on along the chain",
    )
    report_local: bool = ruled(
        False,
        ANY,
        source="rule: off, an extra diagnostic (each client's local-only head)",
    )

    def check(self) -> None:
        if self.dp:
            raise FedshareError("strategy fedpft_chain does not offer DP; use dp_fedpft")
        super().check()

    def setup(self, ctx: SetupContext) -> None:
        super().setup(ctx)
        clients = ctx.config.clients
        n = ctx.data.num_clients
        if clients.fraction < 1.0 or clients.per_round not in (None, n):
            raise FedshareError(
                f"strategy fedpft_chain passes mixtures along all {n} clients in id order; set "
                f"clients.fraction=1 (got {clients.fraction}) and clients.per_round=null"
            )
        self._summary: dict = {}

    def _head(
        self, x: torch.Tensor, y: torch.Tensor, client: Client, purpose: str
    ) -> torch.nn.Linear:
        head = fresh_head(
            x.shape[1],
            self.num_classes,
            torch_generator(client.seed, f"{purpose}/head_init", client.id, device=x.device),
            x.device,
        )
        fit_head(head, x, y, client.train, client.lr, client.rng(f"{purpose}/batches"))
        return head

    def client_update(self, client: Client, message: Message) -> Update:
        feats, labels = client_features(client, self.normalize)
        relay: Mixtures = []
        for hop in client.inbox:  # the predecessor's mixtures (none for client 0)
            relay = unpack_mixtures(hop.payload, self.covariance, self.reg_covar)
        received = {label: (count, g) for label, count, g in relay}
        synth_x, synth_y = self.synthesize(
            relay, client.seed, client.id, "chain/sample", client.device
        )
        x = torch.cat([feats, *synth_x]) if synth_x else feats
        y = torch.cat([labels, *synth_y]) if synth_y else labels
        # the clients' heads stay on the clients; the simulation scores them (audit)
        audit: dict[str, Any] = {
            "head": head_vector(self._head(x, y, client, "chain/head"), torch.float32)
        }
        if self.report_local and len(labels):
            local_only = self._head(feats, labels, client, "chain/local")
            audit["local_head"] = head_vector(local_only, torch.float32)
        if client.id == self.num_clients - 1:
            return Update(client.id, client.num_samples, audit=audit)  # the end of the chain
        k = self.components_for(client.id)
        outgoing: Mixtures = []
        dropped = 0
        classes = sorted(set(labels.tolist()) | set(received))
        for c in classes:
            local = feats[labels == c]
            prior_n, prior = received.get(c, (0, None))
            if len(local) == 0 and prior is not None and self.forward_missing:
                outgoing.append((c, prior_n, prior))
                continue
            synthetic = [s for s, t in zip(synth_x, synth_y, strict=True) if int(t[0]) == c]
            data = torch.cat([local, *synthetic]) if synthetic else local
            g, _ = self.fit_class(data, k, client.rng(f"chain/gmm/{c}"))
            if g is None:  # dropped by the small-class policy: pass on what arrived
                dropped += len(local)
                if prior is not None:
                    outgoing.append((c, prior_n, prior))
                continue
            outgoing.append((c, len(local) + prior_n, g))
        payload = pack_mixtures(outgoing, self.covariance, self.wire_dtype)
        audit["hop_params"] = mixture_cost(payload, self.covariance)[0]
        return Update(
            client.id,
            client.num_samples,
            metrics={"gmm_dropped_samples": float(dropped)},
            to_peers={client.id + 1: Message(payload=payload)},
            audit=audit,
        )

    def _accuracy(self, head: torch.nn.Linear) -> float:
        model = FeatureClassifier(self.model, head, self.normalize)
        return evaluate(model, self.data.dataset, self.config.eval.batch_size)["accuracy"]

    def aggregate(self, updates: Iterable[Update], round_idx: int) -> None:
        chain, local, hop_params = [], [], []
        final = None
        for update in updates:
            hop_params.append(update.audit.get("hop_params", 0))  # 0: the end of the chain
            final = self._load(update.audit["head"])
            chain.append(round(self._accuracy(final), 4))
            if "local_head" in update.audit:
                local.append(round(self._accuracy(self._load(update.audit["local_head"])), 4))
        if final is None:
            raise FedshareError("no client took part in the chain")
        load_head(self.head, final.weight, final.bias)
        self._summary = {"chain_accuracy": chain, "hop_params": hop_params}
        if self.report_local:
            self._summary["local_accuracy"] = local
        self.round_metrics.update(self._summary)

    def final_download(self) -> None:
        """Nothing: there is no server, and every client keeps the head it trained."""
        return None

    def _load(self, vector: torch.Tensor) -> torch.nn.Linear:
        return head_from_vector(vector, self.head.in_features, self.head.out_features)
