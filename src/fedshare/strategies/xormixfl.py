"""XorMixFL and MixFL (Shin et al. 2020, "XOR Mixup"): one-shot sharing of encoded samples.

Section 3 of the paper: devices blend p samples per label (Eq. 1), encode their target-label
blends with M dummy-label blends and upload the codes once (Algorithm 1); the server tops its
target labels up to its largest class (Algorithm 2), trains the global
model centrally on its base samples plus the shared samples, and the run ends (one round).

- XorMixFL: code = g^p(T) ⊕ g^p(D₁) ⊕ … ⊕ g^p(D_M) on uint8 pixel bytes (Eq. 2; the M > 1
  reading `xor_each`); the server decodes with blends of its own samples of the same dummy labels
  (Eq. 3) and labels the result with the target (hard label).
- MixFL (the paper's ablation, Section 4): the device uploads the Mixup fold of
  [g^p(T), g^p(D₁), …, g^p(D_M)] quantised to uint8; the server uses it directly with the
  Mixup soft label (or the hard target label). The fold's ratio is `mix_ratio` (None: α, the
  old default; the Table 3/4 presets fix 0.5, since the paper's MixFL does not move with
  α) and its order `mix_order` (None: `blend_order`, the old default; `equal` gives the target
  and each dummy 1/(M+1), where a left fold shrinks the target to ratio^M as M grows).

Privacy (Section 4.2): `summary.json` gets the MDS distance of the augmented samples (decoded /
mixed) to the device's raw contributors (`mds_mean`, `mds_std`), the same for what is
actually uploaded (`mds_upload_*`), and `upload_target_exposed`, the mean fraction of the
target blend's non-zero pixels that the upload carries unchanged. To measure them each
upload records which of the device's samples it came from in `Update.audit` (ground truth for
the measurement: never sent, never counted, never trained on).

Where the paper is silent (the byte representation, M > 1, the quotas), the choices are
fedshare's. Deviations: the dummy labels a device may pick are those the server also holds (so
every code can be decoded); the `pool` reading of M > 1 is not offered.
"""

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F

from fedshare.config.rules import ANY, SIZE, WIDTH, Rule, ruled
from fedshare.engine.client import Client
from fedshare.engine.rng import torch_generator
from fedshare.errors import FedshareError
from fedshare.functional.mixup import ORDERS, fold_weights, mix, soft_labels
from fedshare.functional.xor_mixup import (
    blend,
    blend_by_label,
    draw_distinct,
    from_bytes,
    quantize,
    to_bytes,
    xor_code,
)
from fedshare.privacy.mds import distance_stats, min_contributor_distance
from fedshare.strategies.base import Message, SetupContext, Update, register_strategy
from fedshare.strategies.oneshot import OneShotServer

MULTI_DUMMY_MODES = ("xor_each", "preblend")
LABELS = ("soft", "hard")


@dataclass
class SampleSharing(OneShotServer):
    """Shared pipeline: quotas, device-side blending and encoding, server training, MDS."""

    p: int = ruled(
        1,
        Rule(low=1, high=1_000),
        source="paper: XorMixFL §4.1, Table 2's caption p = 1 (Fig. 2b: p = 1 is no blending)",
    )
    """Samples per blend (Eq. 1); p = 1 is the raw sample (α then has no effect)."""
    alpha: float = ruled(
        0.5,
        Rule(low=0, high=1, low_open=True, high_open=True),
        source="paper: XorMixFL §4.1, Table 2's caption α = 0.5 (§4.2 names 0.95 for XorMixFL's "
        "accuracy)",
    )
    """Blend ratio α of Eq. 1."""
    M: int = ruled(
        1,
        Rule(low=1, high=1_000),
        source="paper: XorMixFL §3, Eq. 2 XORs one dummy-label blend (Fig. 1's example; Table 2 "
        "names no M)",
    )
    """Dummy labels per shared sample."""
    dummy_labels: list[int] | None = ruled(
        None,
        Rule(low=0, numbers=True, optional=True),
        source="paper: XorMixFL §3, 'selects a dummy label ... at random' (Fig. 1's example; "
        "Algorithm 1 takes it as input)",
    )
    """Fixed dummy labels (the first M are used; Tables 3–4: [3, 4, 5]); None: random per sample."""
    target_labels: list[int] | None = ruled(
        None,
        Rule(low=0, numbers=True, nonempty=True, optional=True),
        source="paper: XorMixFL §4, the partition's target labels",
    )
    """Deficient labels; None: the partition's `info["target_labels"]`, else the server's
    short labels."""
    quota: int | None = ruled(
        None,
        replace(SIZE, low=0, optional=True),
        source="paper: XorMixFL §1, decoding 'until all the samples are evenly distributed across "
        "labels' (Algorithm 2's q_c^target)",
    )
    """Shared samples per target label in all; None: the server's largest class minus its own."""
    blend_order: str = ruled(
        "fold_left",
        Rule(choices=ORDERS),
        source="paper: XorMixFL Eq. 1 read as a left fold (docs/xormixfl.md)",
    )
    """Reading of "g^p" (Eq. 1; the recursion is fedshare's choice): fold_left | nested |
    sequence (binomial) | equal; MixFL also folds [target, dummies] with it unless
    `mix_order` is set."""
    mix_ratio: float | None = ruled(
        None,
        Rule(low=0, high=1, low_open=True, high_open=True, optional=True),
        source="rule: null, α (the Table 3/4 presets set 0.5)",
    )
    """MixFL's target-vs-dummy ratio; None: `alpha`. XorMixFL has no such mix and ignores it
    (it lives here so that one Table 3/4 preset serves both methods)."""
    binarize: bool = ruled(
        False,
        ANY,
        source="rule: off, XOR of the uint8 grey levels (the paper's images)",
    )
    """Blend and encode {0, 255} images instead of uint8 grey levels (the paper's bits)."""
    mds_dims: int | None = ruled(
        None,
        replace(WIDTH, optional=True),
        source="rule: null, exact pixel distances (XorMixFL §4.2's MDS)",
    )
    """MDS distances in a k-dim classical-MDS embedding instead of the exact pixel space."""

    def setup(self, ctx: SetupContext) -> None:
        super().setup(ctx)
        counts = torch.as_tensor(ctx.data.partition.class_counts[self.server])
        c = len(counts)
        targets = self.target_labels
        if targets is None:
            targets = ctx.data.partition.info.get("target_labels")
        if targets is None:
            targets = torch.nonzero(counts < counts.max()).flatten().tolist()
        if not targets or not all(0 <= int(t) < c for t in targets):
            raise FedshareError(
                f"strategy.target_labels={targets} must be a non-empty list of classes in 0…{c - 1}"
            )
        self.targets = [int(t) for t in targets]
        per_label = [
            self.quota if self.quota is not None else int(counts.max() - counts[t])
            for t in self.targets
        ]
        table = torch.zeros(ctx.data.num_clients, len(self.targets), dtype=torch.int32)
        u = len(self.devices)
        for j, q in enumerate(per_label):  # even over the devices (fedshare: 64/63/63)
            for rank, device in enumerate(self.devices):
                table[device, j] = q // u + (rank < q % u)
        self.quota_table = table
        held = [k for k in range(c) if counts[k] > 0 and k not in self.targets]
        if self.dummy_labels is not None:
            if len(self.dummy_labels) < self.M:
                raise FedshareError(
                    f"strategy.dummy_labels={self.dummy_labels} has fewer than M={self.M} labels"
                )
            pool = [int(d) for d in self.dummy_labels[: self.M]]
            bad = [d for d in pool if d not in held]
            if bad:
                raise FedshareError(
                    f"strategy.dummy_labels {bad} are target labels or not held by the server; "
                    f"valid: {held}"
                )
        else:
            pool = held
        if len(pool) < self.M:
            raise FedshareError(
                f"strategy.M={self.M} dummy labels per sample but only {len(pool)} non-target "
                f"labels ({pool}) are available"
            )
        self.dummy_pool = pool

    # ------------------------------------------------------------------ server -> devices
    def broadcast(self, round_idx: int) -> Message:
        """Before the one round: the target labels, every device's quotas and the usable dummies."""
        return Message(
            payload={
                "target_labels": torch.tensor(self.targets, dtype=torch.int16),
                "quota": self.quota_table,
                "dummy_labels": torch.tensor(self.dummy_pool, dtype=torch.int16),
            }
        )

    # ------------------------------------------------------------------ device
    def encode(
        self, target: torch.Tensor, dummies: torch.Tensor, labels: torch.Tensor
    ) -> torch.Tensor:
        """The uploaded uint8 sample from the target blend (n, ...), dummy blends (n, M, ...)."""
        raise NotImplementedError

    def client_update(self, client: Client, message: Message) -> Update:
        """Algorithm 1: for each target label, `quota` codes of fresh blends (with replacement
        across codes, distinct within a blend; fedshare's choice); one upload."""
        quotas = message.payload["quota"][client.id].tolist()
        if not any(quotas):  # the server's own pseudo-client, or a device asked for nothing
            return Update(client.id, 0)
        x_raw, y = client.raw()
        x = to_bytes(x_raw, client.scale)
        gen = client.rng("encode")
        dummy_pool = message.payload["dummy_labels"].tolist()
        usable = [d for d in dummy_pool if bool((y == d).any())]
        if len(usable) < self.M:
            raise FedshareError(
                f"device {client.id} holds only {len(usable)} of the dummy labels "
                f"{dummy_pool}, fewer than strategy.M={self.M}"
            )
        pool = torch.tensor(usable, device=x.device)
        codes, labels, contributors, target_blends = [], [], [], []
        for t, q in zip(message.payload["target_labels"].tolist(), quotas, strict=True):
            if q == 0 or not bool((y == t).any()):
                continue  # nothing asked, or this device holds no sample of label t
            t_ids = torch.full((q,), t, device=x.device)
            t_blend, t_pos = blend_by_label(x, y, t_ids, self.p, *self._blend_args(gen))
            if self.dummy_labels is None:  # fresh random dummy labels per code (fedshare)
                pick = draw_distinct(len(usable), q, self.M, gen, x.device)
                d_ids = pool[pick]
            else:
                d_ids = pool.expand(q, -1)
            d_blend, d_pos = blend_by_label(x, y, d_ids, self.p, *self._blend_args(gen))
            ids = torch.cat([t_ids[:, None], d_ids], dim=1)
            codes.append(self.encode(t_blend, d_blend, ids))
            labels.append(ids)
            contributors.append(torch.cat([t_pos, d_pos.flatten(1)], dim=1))
            target_blends.append(t_blend)
        if not codes:
            return Update(client.id, 0)
        upload = torch.cat(codes)
        dtype = torch.uint8 if client.num_classes <= 256 else torch.int64
        return Update(
            client.id,
            len(upload),
            payload={"samples": upload, "labels": torch.cat(labels).to(dtype)},
            audit={"positions": torch.cat(contributors), "target_blends": torch.cat(target_blends)},
        )

    def _blend_args(self, gen: torch.Generator) -> tuple[float, torch.Generator, str, bool]:
        return self.alpha, gen, self.blend_order, self.binarize

    # ------------------------------------------------------------------ server
    def augment(
        self, uploads: torch.Tensor, labels: torch.Tensor, round_idx: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(augmented uint8 samples, their training labels, server key positions or None)."""
        raise NotImplementedError

    def aggregate(self, updates: Iterable[Update], round_idx: int) -> None:
        """Algorithm 2: collect, decode (XorMixFL) or use as is (MixFL), train on base + shared."""
        received = [u for u in updates if u.payload]
        ds = self.data.dataset
        x_base, y_base = self.server_data()
        if not received:
            self.train_server(x_base, y_base, round_idx)
            self._summary = {"shared_samples": 0}
            return
        uploads = torch.cat([u.payload["samples"] for u in received])
        labels = torch.cat([u.payload["labels"] for u in received]).long()
        contributors = torch.cat(
            [self.data.client_indices[u.client_id][u.audit["positions"]] for u in received]
        )
        target_blends = torch.cat([u.audit["target_blends"] for u in received])
        augmented, y_shared, server_keys = self.augment(uploads, labels, round_idx)
        if y_shared.dim() == 2:  # soft labels: give the base samples one-hot rows
            y_base = F.one_hot(y_base, ds.num_classes).float()
        x = torch.cat([x_base, from_bytes(augmented, ds.scale, ds.x_train.dtype)])
        self.train_server(x, torch.cat([y_base, y_shared]), round_idx)
        self._summary = self._privacy(uploads, augmented, contributors, target_blends, server_keys)
        self._summary.update(shared_samples=len(uploads), target_labels=self.targets)
        self.round_metrics.update(self._summary)

    def _privacy(
        self,
        uploads: torch.Tensor,
        augmented: torch.Tensor,
        contributors: torch.Tensor,
        target_blends: torch.Tensor,
        server_keys: torch.Tensor | None,
    ) -> dict[str, Any]:
        """MDS of the augmented and of the uploaded samples (Section 4.2), and pixel exposure."""
        ds = self.data.dataset
        raw = to_bytes(ds.x_train[contributors], ds.scale)
        keys = raw if server_keys is None else torch.cat([raw, server_keys], dim=1)
        stats = distance_stats(min_contributor_distance(augmented, keys, self.mds_dims))
        upload = min_contributor_distance(uploads, raw, self.mds_dims)
        stats.update(distance_stats(upload, "mds_upload"))
        ink = (target_blends != 0).flatten(1)
        same = ((uploads == target_blends).flatten(1) & ink).sum(1)
        stats["upload_target_exposed"] = float((same / ink.sum(1).clamp_min(1)).mean())
        return stats


@register_strategy("xormixfl")
@dataclass
class XorMixFL(SampleSharing):
    """XorMixFL (Section 3, Eqs. 2–3, Algorithms 1–2): XOR-encoded target samples, decoded at
    the server with its own dummy blends; hard target labels."""

    multi_dummy_mode: str = ruled(
        "xor_each",
        Rule(choices=MULTI_DUMMY_MODES),
        source="rule: Eq. 2 for M > 1 read as one XOR per dummy label (the paper runs M = 1-3, "
        "Table 3, but writes Eq. 2 for one)",
    )
    """M > 1 (XorMixFL §4.3, read by fedshare): `xor_each` XORs M blends; `preblend` first
    blends them into one (Eq. 1)."""
    include_server_keys: bool = ruled(
        False,
        ANY,
        source="rule: off, MDS over the device's contributors only (XorMixFL §4.2)",
    )
    """Count the server's key samples among the contributors of a decoded sample (XorMixFL §4.2)."""

    def _keys(self, blends: torch.Tensor) -> torch.Tensor:
        if self.multi_dummy_mode == "xor_each" or blends.shape[1] == 1:
            return blends
        return blend(blends, self.alpha, self.blend_order, self.binarize)[:, None]

    def encode(
        self, target: torch.Tensor, dummies: torch.Tensor, labels: torch.Tensor
    ) -> torch.Tensor:
        return xor_code(target, self._keys(dummies))  # Eq. 2

    def augment(
        self, uploads: torch.Tensor, labels: torch.Tensor, round_idx: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        ds = self.data.dataset
        x_base, y_base = self.server_data()
        gen = torch_generator(self.config.seed, "server/decode", round_idx, device=self.device)
        keys, pos = blend_by_label(
            to_bytes(x_base, ds.scale), y_base, labels[:, 1:], self.p, *self._blend_args(gen)
        )
        decoded = xor_code(uploads, self._keys(keys))  # Eq. 3
        server_keys = None
        if self.include_server_keys:
            server_idx = self.data.client_indices[self.server][pos.flatten(1)]
            server_keys = to_bytes(ds.x_train[server_idx], ds.scale)
        return decoded, labels[:, 0], server_keys


@register_strategy("mixfl")
@dataclass
class MixFL(SampleSharing):
    """MixFL (the paper's Mixup baseline, Section 4): devices upload the Mixup α-fold of the
    target blend and the M dummy blends; the server trains on it as is, with the Mixup soft
    label."""

    mix_order: str | None = ruled(
        None,
        Rule(choices=ORDERS, optional=True),
        source="rule: null, the fold of blend_order",
    )
    """Order of the [target, dummies] fold: None = `blend_order` (the old behaviour) |
    fold_left | nested | sequence | equal (1/(M+1) each, the target's weight kept as M grows)."""
    label: str = ruled(
        "soft",
        Rule(choices=LABELS),
        source="paper: XorMixFL §1, MixFL's encoding 'follows from Vanilla Mixup' (Zhang et al. "
        "2018: the mixed label)",
    )
    """`soft`: Mixup label distribution; `hard`: the target label."""

    def _weights(self) -> torch.Tensor:
        """Weights of [target, dummy₁, …, dummy_M] in the uploaded mix (and its soft label)."""
        ratio = self.alpha if self.mix_ratio is None else self.mix_ratio
        order = self.blend_order if self.mix_order is None else self.mix_order
        return fold_weights(ratio, self.M + 1, order)

    def encode(
        self, target: torch.Tensor, dummies: torch.Tensor, labels: torch.Tensor
    ) -> torch.Tensor:
        stacked = torch.cat([target[:, None], dummies], dim=1)
        return quantize(mix(stacked, self._weights()).double())

    def augment(
        self, uploads: torch.Tensor, labels: torch.Tensor, round_idx: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        if self.label == "hard":
            return uploads, labels[:, 0], None
        return uploads, soft_labels(labels, self._weights(), self.data.dataset.num_classes), None
