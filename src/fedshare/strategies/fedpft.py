"""FedPFT (Beitollahi et al., 2024): one-shot transfer of per-class Gaussian mixtures of features.

The paper's Section 4.1 (Algorithm 1; EM as its Appendix A code runs it), Section 4.3 and
Appendix B (DP-FedPFT), Section 6.3 (what is sent and its cost, Eqs. 9–11).

One round. Each client runs the frozen extractor f over its data (`feature_heads`), fits for
every class c it holds a K-component mixture g^{i,c} of the family `covariance` (`fedshare.
functional.gmm`: our own seeded EM, see its docstring for why), and uploads once, as float16,
the mixture parameters plus its class ids and counts n_{i,c} (`pack_mixtures`; the engine's
`bytes_shared` is then 2·(Section 6.3's count) + 8 bytes of metadata per (client, class)). The
server draws n_{i,c}·`synthetic_multiplier` samples from every mixture, each (client, class) from
its own stream, pools them and trains a fresh linear head h on them with the run's `train` settings;
the global model is h∘f. The head's download is not counted by the engine
(its `bytes_down` counts broadcasts, which are empty here): it costs (C·d + C) numbers.

Classes with n_{i,c} ≤ K: `small_class_policy` "drop" (the paper's code: skipped, their samples
are lost to the server) or "shrink" (K_eff = max(1, min(K, n − 1)); n = 1 gives one component of
variance reg_covar). Each client may use its own K (`client_components`, cycled).

DP-FedPFT (`dp=true`, or `strategy=dp_fedpft`): K = 1 only; features are L2-normalised (train
and, through the evaluated model, test), each (client, class) releases μ̃ and Σ̂ + noise
(`fedshare.privacy.dp`), reduced to the family afterwards (spherical: λ = tr/d, diag: the
diagonal, floored at reg_covar; full: the PSD projection). `dp_reduction` says what is read
for diag/spherical: "raw" (default) the unprojected noisy matrix, unbiased for the true
trace/diagonal; "projected" (the old default) the PSD projection, biased upward (it
keeps only the positive noise eigenvalues). Both are post-processing of one release (same
guarantee); raw was measured +7.2 pp (I = 10) and +12.9 pp (I = 50) at ε = 1 on the CIFAR-10
sample features, hence the default. With `dp_calibration=paper` the exact (ε, δ) condition is
checked per pair (`dp_check`, default on; off reproduces the paper's unchecked σ). δ defaults to
1/n_{i,c}; pairs with n < 2 are dropped. The counts n_{i,c} are released without noise.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import torch

from fedshare.config.rules import ANY, COMPONENTS, NON_NEGATIVE, POSITIVE, STEPS, Rule, ruled
from fedshare.engine.client import Client
from fedshare.engine.optim import learning_rate
from fedshare.engine.rng import torch_generator
from fedshare.errors import FedshareError
from fedshare.functional.gmm import (
    COVARIANCE_TYPES,
    WIRE_DTYPES,
    GaussianMixture,
    component_params,
    fit_gmm,
    pack_mixtures,
    point_mass,
    unpack_mixtures,
)
from fedshare.privacy import dp
from fedshare.privacy.dp import CALIBRATIONS, LOG_TERMS, REDUCTIONS
from fedshare.strategies._feature_heads import (
    HEAD_TRAINING,
    FeatureClassifier,
    client_features,
    fit_head,
    fresh_head,
    head_accuracy,
    linear_head,
    load_head,
)
from fedshare.strategies.base import Message, SetupContext, Strategy, Update, register_strategy

SMALL_CLASS_POLICIES = ("drop", "shrink")
META_BYTES_PER_PAIR = 8  # int16 label + int16 component count + int32 sample count


# --------------------------------------------------------------------------- Section 6.3
def gmm_params(dim: int, n_components: int, num_classes: int, covariance_type: str) -> int:
    """Numbers one client sends for C classes of K components each (Section 6.3, Eqs. 9–11)."""
    return component_params(dim, covariance_type) * n_components * num_classes


def gmm_bytes(
    dim: int, n_components: int, num_classes: int, covariance_type: str, bits: int = 16
) -> int:
    """Bytes of `gmm_params` at `bits` per number (the paper: 16)."""
    return gmm_params(dim, n_components, num_classes, covariance_type) * bits // 8


def raw_feature_bytes(num_samples: int, dim: int, bits: int = 16) -> int:
    """Sending the raw features instead (the Centralized oracle's cost, Section 5.2)."""
    return num_samples * dim * bits // 8


def head_bytes(dim: int, num_classes: int, bits: int = 16) -> int:
    """A linear head W, b: C·d + C numbers."""
    return (num_classes * dim + num_classes) * bits // 8


def mixture_cost(payload: dict[str, torch.Tensor], covariance_type: str) -> tuple[int, int]:
    """(formula parameters, metadata pairs) of one packed payload."""
    if "gmm_components" not in payload:
        return 0, 0
    dim = int(payload["gmm_means"].shape[1])
    k_total = int(payload["gmm_components"].long().sum())
    return k_total * component_params(dim, covariance_type), int(payload["gmm_labels"].numel())


# --------------------------------------------------------------------------- the strategy
@register_strategy("fedpft")
@dataclass
class FedPFT(Strategy):
    """Centralized one-shot FedPFT (Algorithm 1) with the DP variant (Section 4.3) as an option."""

    one_shot: ClassVar[bool] = True
    train_defaults: ClassVar[Mapping[str, Any]] = HEAD_TRAINING

    n_components: int = ruled(
        10,
        COMPONENTS,
        source="paper: FedPFT §5.3, Table 2's 𝒢_diag(K=10) (App. A's listing: 10 too)",
    )
    covariance: str = ruled(
        "diag",
        Rule(choices=COVARIANCE_TYPES),
        source="paper: FedPFT §5.3 (Table 2's 𝒢_diag) and App. A's listing, diagonal covariances",
    )
    """full | diag | spherical (the families of Eq. 2)."""
    client_components: list[int] | None = ruled(
        None,
        replace(COMPONENTS, numbers=True, optional=True),
        source="rule: every client uses n_components (per-client K only for FedPFT's "
        "heterogeneous-K check)",
    )
    """Per-client K (client k uses entry k mod length); None: every client uses n_components."""
    small_class_policy: str = ruled(
        "drop",
        Rule(choices=SMALL_CLASS_POLICIES),
        source="code: FedPFT's code (its first author's Flower baseline, adap/flower "
        "baselines/fedpft/fedpft/utils.py learn_gmm, L76-78: fits a class only if n_{i,c} > K)",
    )
    reg_covar: float = ruled(
        1e-6,
        NON_NEGATIVE,
        source="paper: FedPFT App. A's listing fits scikit-learn's GaussianMixture at its default "
        "reg_covar 1e-6 (the Flower baseline's learn_gmm too)",
    )
    tol: float = ruled(
        1e-3,
        NON_NEGATIVE,
        source="paper: FedPFT App. A's listing, scikit-learn GaussianMixture's default tol 1e-3 "
        "(the Flower baseline's learn_gmm: 1e-12)",
    )
    max_iter: int = ruled(
        100,
        replace(STEPS, low=1),
        source="paper: FedPFT App. A's listing, scikit-learn GaussianMixture's default max_iter "
        "100 (the Flower baseline, adap/flower baselines/fedpft/fedpft/utils.py L44-45 and its "
        "config: 1,000-10,000 iterations to tol 1e-12)",
    )
    synthetic_multiplier: float = ruled(
        1.0,
        Rule(low=0, low_open=True, high=1_000),
        source="paper: FedPFT §4.1 (Eq. 4, Algorithm 1 line 14), the server draws |F^{i,c}| "
        "samples",
    )
    """Synthetic samples per mixture = round(n_{i,c} · multiplier), at least 1."""
    wire_dtype: str = ruled(
        "float16",
        Rule(choices=tuple(WIRE_DTYPES)),
        source="paper: FedPFT §5.1, 'a 16-bit encoding' for the GMM parameters",
    )
    """float16 (the paper) | float32 | float64: precision of the uploaded parameters."""
    l2_normalize: bool = ruled(
        False,
        ANY,
        source="paper: FedPFT §4.1 uses the features as extracted (normalised only under DP, §4.3)",
    )
    """L2-normalise the features (train and test); always on with dp."""
    dp: bool = ruled(
        False,
        ANY,
        source="paper: FedPFT §4.1, plain FedPFT has no DP (strategy=dp_fedpft is §4.3)",
    )
    dp_epsilon: float = ruled(1.0, POSITIVE, source="paper: FedPFT §5.1, ε = 1")
    dp_delta: float | None = ruled(
        None,
        Rule(low=0, high=1, low_open=True, high_open=True, optional=True),
        source="paper: FedPFT §5.1, δ = 1/|D^{i,c}|",
    )
    """None: 1/n_{i,c} (the paper's setting)."""
    dp_log_term: str = ruled(
        "4/delta",
        Rule(choices=LOG_TERMS),
        source="paper: FedPFT Theorem 4.1, log(4/δ)",
    )
    """Theorem 4.1's ln(4/δ) or the proof's ln(2/δ) (Appendix B)."""
    dp_calibration: str = ruled(
        "paper",
        Rule(choices=CALIBRATIONS),
        source="paper: FedPFT Theorem 4.1's σ",
    )
    """paper (Theorem 4.1's σ) | analytic (Balle & Wang's analytic Gaussian mechanism)."""
    dp_reduction: str = ruled(
        "raw",
        Rule(choices=REDUCTIONS),
        source="rule: the raw read of the private covariance (post-processing, the same guarantee "
        "as Theorem 4.1)",
    )
    """raw (unprojected noisy Σ: unbiased, the default) | projected: how diag and
    spherical read the private covariance (full is always projected)."""
    dp_check: bool = ruled(
        True,
        ANY,
        source="rule: on, a run stops where the paper's σ fails the exact (ε, δ) condition",
    )
    """Stop when the paper's σ fails the exact (ε, δ) condition (False: the paper's behaviour)."""

    # ------------------------------------------------------------------ setup
    def setup(self, ctx: SetupContext) -> None:
        super().setup(ctx)
        self.head = linear_head(ctx.model)
        self._summary: dict[str, Any] = {}

    def check(self) -> None:
        """DP-FedPFT (§4.3) is defined for one Gaussian per class, and its privacy budget,
        log term and calibration must give a noise scale."""
        super().check()
        if not self.dp:
            return
        ks = [self.n_components, *(self.client_components or [])]
        if max(ks) != 1:
            raise FedshareError(
                f"DP-FedPFT is defined for one Gaussian per class (§4.3): set "
                f"strategy.n_components=1, got {ks}"
            )
        dp.noise_std(
            10,
            self.dp_epsilon,
            self.dp_delta or 0.1,
            self.dp_log_term,
            self.dp_calibration,
            check=False,
        )  # validates the budget, log term and calibration; the (ε, δ) check needs n

    @property
    def normalize(self) -> bool:
        return self.l2_normalize or self.dp

    def components_for(self, client_id: int) -> int:
        if self.client_components:
            return int(self.client_components[client_id % len(self.client_components)])
        return self.n_components

    # ------------------------------------------------------------------ client
    def broadcast(self, round_idx: int) -> Message:
        return Message()  # f is known to everyone; nothing else goes down before the upload

    def fit_class(
        self, x: torch.Tensor, k: int, generator: torch.Generator
    ) -> tuple[GaussianMixture | None, int]:
        """The mixture of one class's features (None when the policy drops it), EM iterations."""
        n = len(x)
        min_n = 2 if self.dp else 1
        if n < min_n or (self.small_class_policy == "drop" and n <= k):
            return None, 0
        if self.dp:
            return self.private_gaussian(x, generator), 0
        if n == 1:
            return point_mass(x, self.covariance, self.reg_covar), 0
        k_eff = min(k, n - 1) if self.small_class_policy == "shrink" else k
        g, info = fit_gmm(
            x, k_eff, self.covariance, self.reg_covar, self.tol, self.max_iter, generator
        )
        return g, info.n_iter

    def private_gaussian(self, x: torch.Tensor, generator: torch.Generator) -> GaussianMixture:
        """DP-FedPFT's one-component release of `x`, reduced per `dp_reduction`."""
        raw = self.dp_reduction == "raw" and self.covariance != "full"
        mean, cov, _ = dp.private_mean_cov(
            x,
            self.dp_epsilon,
            self.dp_delta,
            generator,
            self.dp_log_term,
            self.dp_calibration,
            project=not raw,
            check=self.dp_check,
        )
        covs = dp.reduce_covariance(cov, self.covariance)
        if raw:
            covs = covs.clamp_min(self.reg_covar)  # post-processing: a valid variance
        ones = torch.ones(1, dtype=mean.dtype, device=mean.device)
        return GaussianMixture(ones, mean[None], covs, self.covariance)

    def local_mixtures(
        self, feats: torch.Tensor, labels: torch.Tensor, k: int, client: Client, prefix: str
    ) -> tuple[list[tuple[int, int, GaussianMixture]], dict[str, float]]:
        """(label, n, mixture) for every class in `labels`, and fitting statistics."""
        mixtures, dropped, iters = [], 0, []
        for c in torch.unique(labels).tolist():
            x = feats[labels == c]
            g, n_iter = self.fit_class(x, k, client.rng(f"{prefix}/{c}"))
            if g is None:
                dropped += len(x)
                continue
            mixtures.append((int(c), len(x), g))
            iters.append(n_iter)
        stats = {
            "gmm_dropped_samples": float(dropped),
            "em_iterations": sum(iters) / max(len(iters), 1),
        }
        return mixtures, stats

    def client_update(self, client: Client, message: Message) -> Update:
        feats, labels = client_features(client, self.normalize)
        mixtures, stats = self.local_mixtures(
            feats, labels, self.components_for(client.id), client, "gmm"
        )
        payload = pack_mixtures(mixtures, self.covariance, self.wire_dtype)
        return Update(client.id, client.num_samples, payload=payload, metrics=stats)

    # ------------------------------------------------------------------ server
    def synthesize(
        self,
        mixtures: list[tuple[int, int, GaussianMixture]],
        seed: int,
        client_id: int,
        purpose: str,
        device: torch.device,
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Samples and labels from each (label, n, mixture), one stream per (client, class)."""
        xs, ys = [], []
        for label, count, g in mixtures:
            m = max(1, round(count * self.synthetic_multiplier))
            gen = torch_generator(seed, purpose, client_id, label, device=g.means.device)
            xs.append(g.sample(m, gen).float().to(device))
            ys.append(torch.full((m,), label, dtype=torch.long, device=device))
        return xs, ys

    def train_head(
        self, x: torch.Tensor, y: torch.Tensor, round_idx: int, purpose: str
    ) -> torch.nn.Linear:
        """A fresh head trained on (x, y) with the run's train settings."""
        seed = self.config.seed
        head = fresh_head(
            x.shape[1],
            self.data.dataset.num_classes,
            torch_generator(seed, f"{purpose}/head_init", device=self.device),
            self.device,
        )
        fit_head(
            head,
            x,
            y,
            self.config.train,
            learning_rate(self.config.train, round_idx),
            torch_generator(seed, f"{purpose}/batches", round_idx, device=self.device),
        )
        return head

    def aggregate(self, updates: Iterable[Update], round_idx: int) -> None:
        xs: list[torch.Tensor] = []
        ys: list[torch.Tensor] = []
        params = pairs = 0
        for update in updates:
            p, n_pairs = mixture_cost(update.payload, self.covariance)
            params, pairs = params + p, pairs + n_pairs
            received = unpack_mixtures(update.payload, self.covariance, self.reg_covar)
            x, y = self.synthesize(
                received, self.config.seed, update.client_id, "fedpft/sample", self.device
            )
            xs += x
            ys += y
        if not xs:
            raise FedshareError(
                "no client sent a mixture (every class had at most K samples under "
                "small_class_policy=drop); lower strategy.n_components or use shrink"
            )
        x_syn, y_syn = torch.cat(xs), torch.cat(ys)
        head = self.train_head(x_syn, y_syn, round_idx, "fedpft/server")
        load_head(self.head, head.weight, head.bias)
        self._summary = {
            "gmm_pairs": pairs,
            "gmm_params": params,
            "gmm_param_bytes": params * WIRE_DTYPES[self.wire_dtype].itemsize,
            "gmm_meta_bytes": pairs * META_BYTES_PER_PAIR,
            "synthetic_samples": len(y_syn),
            "synthetic_accuracy": head_accuracy(self.head, x_syn, y_syn),
        }
        self.round_metrics.update(self._summary)

    def global_model(self) -> torch.nn.Module:
        if self.normalize:
            return FeatureClassifier(self.model, self.head, l2_normalize=True)
        return self.model

    def summary_metrics(self) -> dict[str, Any]:
        return dict(self._summary)


@register_strategy("dp_fedpft")
@dataclass
class DPFedPFT(FedPFT):
    """DP-FedPFT (Section 4.3): one spherical Gaussian per (client, class), (ε = 1, δ = 1/n)-DP."""

    n_components: int = ruled(
        1,
        COMPONENTS,
        source="paper: FedPFT §4.3 (Theorem 4.1 for K = 1) and §5.1, K = 1 for all DP-FedPFT runs",
    )
    covariance: str = ruled(
        "spherical",
        Rule(choices=COVARIANCE_TYPES),
        source="paper: FedPFT App. D.2, Table 5's 𝒢̂_spher(k=1) (Theorem 4.1 is stated for 𝒢_full)",
    )
    dp: bool = ruled(True, ANY, source="paper: FedPFT §4.3 (DP-FedPFT)")
