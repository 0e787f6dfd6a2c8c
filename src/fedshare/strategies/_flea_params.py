"""FLea's parameters (Xia et al., KDD 2024), each with its rule and the source of its default.

`fedshare.strategies.flea.FLea` inherits them; they are its `strategy.*` keys.
"""

from dataclasses import dataclass, replace

from fedshare.config.rules import ANY, FRACTION, NON_NEGATIVE, POSITIVE, SIZE, Rule, ruled
from fedshare.functional.losses import KD_DIRECTIONS
from fedshare.privacy.dcor import VARIANTS

KD_INPUTS = ("buffer", "mixed")
DCOR_SCHEDULES = ("linear", "constant")
BN_MODES = ("eval", "train")


@dataclass
class FLeaParameters:
    """The `strategy.*` keys of `strategy=flea` (Section 3, Section 4.1 and the authors' code)."""

    share_fraction: float = ruled(0.1, FRACTION, source="paper: FLea §4.1.2, α = 10 %")
    share_with_replacement: bool = ruled(
        False,
        ANY,
        source="rule: without replacement, the paper's subset S_k (FLea's code, userbase.py L124, "
        "draws with replacement: true)",
    )
    share_min_samples: int = ruled(
        10,
        replace(SIZE, low=0),
        source="code: FLea's code (XTxiatong/FLea at b85be07, userbase.py L123: int(α·n) = 0 below "
        "10 samples, so such clients share nothing)",
    )
    share_features: bool = ruled(
        True,
        ANY,
        source="paper: FLea §3.3.1 (false is §4.3.2's 'without mix-up', Fig. 10)",
    )
    """False: no buffer is ever built ("without mix-up", Section 4.3.2: local CE + dCor only)."""
    split_layer: int | None = ruled(
        None,
        Rule(low=0, optional=True),
        source="paper: FLea §4.1.2 and App. C.2 (Tables 3, 4, 6), the model's FLea split ('after "
        "several conventional layers', each model's flea_layer)",
    )
    """Blocks in the extractor θ[:l]; None = the model's FLea split (`flea_layer`)."""
    allow_penultimate_split: bool = ruled(
        False,
        ANY,
        source="rule: off, FLea's split is an early block (§4.1.2, 'after several conventional "
        "layers')",
    )
    """Allow l = the head's input (λ2 was tuned for early layers; there it ruins accuracy)."""
    beta_a: float = ruled(
        2.0, POSITIVE, source="paper: FLea §4.1.2 and App. C.2, β ~ Beta(2, 2) for Eq. 2"
    )
    beta_per_sample: bool = ruled(
        True,
        ANY,
        source="code: FLea's code (XTxiatong/FLea, myuser.py L1495: np.random.beta(2, 2, n), one β "
        "per sample)",
    )
    local_ce_weight: float = ruled(
        1.0,
        NON_NEGATIVE,
        source="code: FLea's code (XTxiatong/FLea, myuser.py MCE_DeC_KL adds plain CE on the local "
        "batch at alpha_1 = 1)",
    )
    mix_ce_weight: float = ruled(
        1.0,
        NON_NEGATIVE,
        source="paper: FLea §3.3.2 Eq. 6, the mixed CE (Eq. 3) at unit weight",
    )
    kd_weight: float = ruled(
        1.0, NON_NEGATIVE, source="paper: FLea §4.1.2 and App. C.2, λ1 = 1 in Eq. 6"
    )
    kd_input: str = ruled(
        "buffer",
        Rule(choices=KD_INPUTS),
        source="code: FLea's code (XTxiatong/FLea, myuser.py L1518: KD on the buffer's "
        "activations)",
    )
    kd_direction: str = ruled(
        "teacher_to_student",
        Rule(choices=KD_DIRECTIONS),
        source="code: FLea's code (XTxiatong/FLea, myuser.py L1522: KLDivLoss(log p_local, "
        "p_global) = KL(global ‖ local))",
    )
    kd_temperature: float = ruled(
        1.0,
        POSITIVE,
        source="code: FLea's code (XTxiatong/FLea, myuser.py L1477: temperature 1)",
    )
    dcor_weight: float = ruled(
        3.0, NON_NEGATIVE, source="paper: FLea §4.1.2 and App. C.2, λ2 = 3 in Eq. 6"
    )
    dcor_schedule: str = ruled(
        "linear",
        Rule(choices=DCOR_SCHEDULES),
        source="code: FLea's code (XTxiatong/FLea, myuser.py L1283: the linear λ2 schedule)",
    )
    dcor_decay: float = ruled(
        0.1,
        NON_NEGATIVE,
        source="code: FLea's code (XTxiatong/FLea, myuser.py L1283: λ2 = 3 − 0.1·g)",
    )
    dcor_floor: float = ruled(
        1.0,
        NON_NEGATIVE,
        source="code: FLea's code (XTxiatong/FLea, myuser.py L1283: λ2 = 1 from g = 20)",
    )
    dcor_variant: str = ruled(
        "code",
        Rule(choices=VARIANTS),
        source="code: FLea's code (XTxiatong/FLea, myuser.py L21: plain-distance dCor; Eq. 5 "
        "squares the distances)",
    )
    warmup: bool = ruled(
        True,
        ANY,
        source="code: FLea's code (XTxiatong/FLea, myserver.py L234: the warm-up round g = 0)",
    )
    warmup_epoch_multiplier: int = ruled(
        3,
        Rule(low=1, high=100),
        source="code: FLea's code (XTxiatong/FLea, myserver.py L244: warm-up 3·E epochs)",
    )
    warmup_kd_weight: float = ruled(
        0.5,
        NON_NEGATIVE,
        source="code: FLea's code (XTxiatong/FLea, myuser.py L1265: warm-up 0.5·KD)",
    )
    warmup_dcor_weight: float = ruled(
        3.0,
        NON_NEGATIVE,
        source="code: FLea's code (XTxiatong/FLea, myuser.py L1231/L1265: warm-up 3·dCor)",
    )
    extract_bn_mode: str = ruled(
        "eval",
        Rule(choices=BN_MODES),
        source="code: FLea's code (XTxiatong/FLea, userbase.py L100 extracts the shared "
        "activations in eval mode)",
    )
    metric_chunk: int = ruled(
        32,
        SIZE,
        source="rule: engineering only (the chunk of the privacy metric's batches); no effect on "
        "training",
    )
    """Chunk size of the shared-activation dCor metric (dCor's bias depends on n)."""
