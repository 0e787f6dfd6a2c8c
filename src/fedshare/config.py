"""Typed run settings, shared by the Hydra command line and `fedshare.simulate`.

The dataclasses double as Hydra structured-config schemas, so a wrong key or type in an
override is rejected before anything runs.
"""

from dataclasses import dataclass, field, fields, make_dataclass
from typing import Any


@dataclass
class ClientsConfig:
    """How many clients there are and which of them take part in a round."""

    num: int | None = 10
    """Number of clients; ignored when `samples_per_client` is set."""
    samples_per_client: int | None = None
    """FLea's |D_k|: the client count becomes len(train set) // samples_per_client."""
    fraction: float = 1.0
    """Fraction of clients sampled per round (floor, at least 1)."""
    per_round: int | None = None
    """Absolute number sampled per round; overrides `fraction`."""
    availability: Any = 1.0
    """Probability a sampled client succeeds: a scalar, or one value per client group."""
    availability_period: int = 1
    """Hold each availability draw for this many rounds (ReBaFL's straggling periods)."""


@dataclass
class TrainConfig:
    """Local training: epochs, batches, optimizer and per-round learning-rate schedule."""

    local_epochs: int = 1
    batch_size: int = 32
    optimizer: str = "sgd"
    lr: float = 0.01
    momentum: float = 0.0
    weight_decay: float = 0.0
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    optimizer_reset_each_step: bool = False
    """Forget the optimizer state after every step (FLea's code builds a new Adam per step)."""
    lr_schedule: str = "constant"
    """constant | exp (lr·decay^r) | step (lr·decay^(r // step)) | linear (lr·(1 − decay·r))."""
    lr_decay: float = 1.0
    lr_step: int = 1
    lr_floor: float = 0.0
    """The schedule never goes below this learning rate."""
    augment: bool = True
    """Apply the dataset's batch augmentation (crop/flip) during local training."""
    amp: bool = False
    """Compute the clients' local losses under bfloat16 autocast (weights, gradients and the
    optimizer stay float32). Faster where the hardware has bf16 arithmetic, but results move
    beyond float rounding (docs/performance.md has the measured speed and accuracy)."""
    batched: int = 0
    """Train up to this many of a round's clients as one vectorised step
    (`fedshare.engine.batched`: stacked parameters, `vmap`); 0 or 1 = one after another.
    Strategies whose client step is not plain local training (FedAvg, FedProx and the methods
    that inherit their client step have it) run serially and say so once."""
    compile: bool = False
    """`torch.compile` the worker model once per run: every client's `model(x)` then runs the
    compiled graph (a one-off compile of tens of seconds; docs/performance.md)."""


@dataclass
class EvalConfig:
    every: int = 1
    """Evaluate the global model every `every` rounds, and always at the last round."""
    batch_size: int = 1024
    per_class: bool = False
    personal: bool = False
    """Also score each client's model on a test split with its own label mix
    (`fedshare.engine.personal_eval`): `personal_accuracy` (mean) and `personal_accuracy_min`."""
    personal_size: int = 100
    """Test samples per client for the personal evaluation."""
    davies_bouldin: bool = False
    """Log the Davies–Bouldin score of penultimate features with the labels as clusters (FLea's
    Fig. 3, `fedshare.engine.separability`): the global model's on the test set
    (`test_davies_bouldin`) and, after each client step of a round's first phase, the trained
    local model's on the client's own data and on the test set (`local_train_davies_bouldin`,
    `local_test_davies_bouldin`, means over the round's clients). Models without a body skip."""
    context_attack: list[int] = field(default_factory=list)
    """Attacker training-set sizes of the context-identification attack (flea.md §7, Fig. 9(d),
    `fedshare.privacy.context`) on what the strategy shares, run once after the last round:
    `summary.json` gets `context_attack_accuracy` ({size: %}) and `context_attack_samples_for_90`.
    Empty (default) = off; only for strategies that share data-derived items, on images."""


@dataclass
class CheckpointConfig:
    every: int = 1
    """Keep the latest state in `checkpoint.pt` (one file, overwritten atomically) every `every`
    rounds, so a killed run can be resumed; 0 = never."""


@dataclass
class ServerDataConfig:
    """Data the server holds: carved, class-balanced, from the training set before the
    clients' partition (FedAvg-FT's labelled set; FedKT's and FedBE's public inputs)."""

    size: int = 0
    """Training samples the server takes (0 = none)."""
    labelled: bool = True
    """False: the server may use the inputs only."""


@dataclass
class SimulationConfig:
    """Everything the engine needs besides the strategy, the data and the model."""

    rounds: int = 10
    seed: int = 0
    device: str = "auto"
    memory_format: str = "auto"
    """How the models store 4-d (convolution) weights: `auto` = channels-last for every model
    that has a convolution (measured faster for every conv model of the zoo, on CPU and GPU:
    docs/performance.md), `channels_last`, or `contiguous` (PyTorch's default). Results agree
    up to floating-point rounding; the flat weight vectors that cross the network are the same
    either way."""
    progress: bool = True
    clients: ClientsConfig = field(default_factory=ClientsConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)


def unset_fields(cls: type, name: str) -> type:
    """A copy of dataclass `cls` whose fields are all optional and None (= not set here), so
    the layers of defaults below the command line can fill what the user did not set."""
    return make_dataclass(
        name,
        [(f.name, f.type if f.type is Any else f.type | None, None) for f in fields(cls)],
        namespace={"__doc__": f"{cls.__name__} with every field unset (None) by default."},
    )


TrainSettings = unset_fields(TrainConfig, "TrainSettings")


@dataclass
class RunConfig(SimulationConfig):
    """The Hydra schema of one command-line run: simulation settings plus the four choices.

    `rounds` and the `train` keys are None unless a preset or the command line sets them; the
    run fills them from the strategy, then the dataset, then the global defaults
    (`fedshare.defaults`).
    """

    rounds: int | None = None  # type: ignore[assignment]
    train: TrainSettings = field(default_factory=TrainSettings)  # type: ignore[valid-type]
    strategy: Any = None
    data: Any = None
    partition: Any = None
    model: Any = None
    run_dir: str | None = None
    resume: bool = False
    overwrite: bool = False
    """Replace a run already in `run_dir` (its files are deleted first)."""
    workers: int = 1
    """Processes that share each round's clients (`fedshare.engine.distributed`): K > 1 starts
    K processes on this machine through torch's launcher; under torchrun it must be 1 (the
    default) or torchrun's process count."""
    server_data: ServerDataConfig = field(default_factory=ServerDataConfig)
