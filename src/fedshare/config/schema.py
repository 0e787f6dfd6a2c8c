"""Typed run settings, shared by the Hydra command line and `fedshare.simulate`.

The dataclasses double as Hydra structured-config schemas, so a wrong key or type in an
override is rejected before anything runs; each field's `Rule` (`fedshare.config.rules`) says which
values it accepts, checked by `fedshare.config.validation`.
"""

from dataclasses import dataclass, field, fields, make_dataclass, replace
from typing import Any, cast

from fedshare.config.rules import (
    ANY,
    COUNT,
    LEARNING_RATE,
    NON_NEGATIVE,
    POSITIVE,
    PROBABILITY,
    RULE,
    SEED_LIMIT,
    TRAINING_FACTOR,
    Rule,
    ruled,
)

OPTIMIZERS = ("sgd", "adam")
SCHEDULES = ("constant", "exp", "step", "linear")
MEMORY_FORMATS = ("auto", "channels_last", "contiguous")
LOGGER_NAMES = ("tensorboard", "wandb", "mlflow")
"""The experiment trackers of `logger=` (`fedshare.tracking.LOGGERS` registers them)."""
MAX_CLIENTS = 10**6
"""The most clients a run simulates: every client has index lists and state in memory, so a
typo's size is refused before anything is allocated."""
MAX_WORKERS = 1024
"""The most processes `workers=K` starts on one machine."""


@dataclass
class ClientsConfig:
    """How many clients there are and which of them take part in a round."""

    num: int | None = ruled(10, Rule(low=1, high=MAX_CLIENTS, optional=True))
    """Number of clients; ignored when `samples_per_client` is set."""
    samples_per_client: int | None = ruled(None, Rule(low=1, optional=True))
    """FLea's |D_k|: the client count becomes len(train set) // samples_per_client."""
    fraction: float = ruled(1.0, PROBABILITY)
    """Fraction of clients sampled per round (floor, at least 1)."""
    per_round: int | None = ruled(None, Rule(low=1, high=MAX_CLIENTS, optional=True))
    """Absolute number sampled per round; overrides `fraction`."""
    availability: Any = ruled(1.0, replace(PROBABILITY, scalar_or_list=True))
    """Probability a sampled client succeeds: a scalar, or one value per client group."""
    availability_period: int = ruled(1, COUNT)
    """Hold each availability draw for this many rounds (ReBaFL's straggling periods)."""
    models: list[Any] = ruled(rule=ANY, default_factory=list)
    """Clients' own architectures (a model name or a mapping with a name and options), given
    to the clients by `model_of`; empty = every client has the run's `model`."""
    model_of: Any = ruled("cyclic", ANY)
    """Which of `models` each client has: `cyclic` (client k: `models[k mod len]`), `blocks`
    (contiguous runs), `random` (the cyclic counts, shuffled with the seed) or one entry per
    client (a position in `models` or its label)."""


@dataclass
class TrainConfig:
    """Local training: epochs, batches, optimizer and per-round learning-rate schedule."""

    local_epochs: int = ruled(1, COUNT)
    batch_size: int = ruled(32, COUNT)
    optimizer: str = ruled("sgd", Rule(choices=OPTIMIZERS))
    lr: float = ruled(0.01, LEARNING_RATE)
    momentum: float = ruled(0.0, Rule(low=0, high=1))
    weight_decay: float = ruled(0.0, TRAINING_FACTOR)
    betas: list[float] = ruled(
        rule=Rule(low=0, high=1, high_open=True, length=2), default_factory=lambda: [0.9, 0.999]
    )
    optimizer_reset_each_step: bool = ruled(False, ANY)
    """Forget the optimizer state after every step (FLea's code builds a new Adam per step)."""
    lr_schedule: str = ruled("constant", Rule(choices=SCHEDULES))
    """constant | exp (lr·decay^r) | step (lr·decay^(r // step)) | linear (lr·(1 − decay·r))."""
    lr_decay: float = ruled(1.0, TRAINING_FACTOR)
    """The schedule's factor; exp and step need it above 0."""
    lr_step: int = ruled(1, COUNT)
    lr_floor: float = ruled(0.0, TRAINING_FACTOR)
    """The schedule never goes below this learning rate."""
    augment: bool = ruled(True, ANY)
    """Apply the dataset's batch augmentation (crop/flip) during local training."""
    amp: bool = ruled(False, ANY)
    """Compute the clients' local losses under bfloat16 autocast (weights, gradients and the
    optimizer stay float32). Faster where the hardware has bf16 arithmetic, but results move
    beyond float rounding (docs/performance.md has the measured speed and accuracy)."""
    batched: int = ruled(0, NON_NEGATIVE)
    """Train up to this many of a round's clients as one vectorised step
    (`fedshare.engine.batched`: stacked parameters, `vmap`); 0 or 1 = one after another.
    Strategies whose client step is not plain local training (FedAvg, FedProx and the methods
    that inherit their client step have it) run serially and say so once."""
    compile: bool = ruled(False, ANY)
    """`torch.compile` the worker model once per run: every client's `model(x)` then runs the
    compiled graph (a one-off compile of tens of seconds; docs/performance.md)."""


@dataclass
class EvalConfig:
    every: int = ruled(1, COUNT)
    """Evaluate the global model every `every` rounds, and always at the last round."""
    batch_size: int = ruled(1024, COUNT)
    per_class: bool = ruled(False, ANY)
    personal: bool = ruled(False, ANY)
    """Also score each client's model on a test split with its own label mix
    (`fedshare.engine.personal_eval`): `personal_accuracy` (mean) and `personal_accuracy_min`."""
    personal_size: int = ruled(100, COUNT)
    """Test samples per client for the personal evaluation."""
    davies_bouldin: bool = ruled(False, ANY)
    """Log the Davies–Bouldin score of penultimate features with the labels as clusters (FLea's
    Fig. 3, `fedshare.metrics.separability`): the global model's on the test set
    (`test_davies_bouldin`) and, after each client step of a round's first phase, the trained
    local model's on the client's own data and on the test set (`local_train_davies_bouldin`,
    `local_test_davies_bouldin`, means over the round's clients). Models without a body skip."""
    context_attack: list[int] = ruled(rule=replace(COUNT, numbers=True), default_factory=list)
    """Attacker training-set sizes of the context-identification attack (FLea §4.4, Fig. 9(d),
    `fedshare.privacy.context`) on what the strategy shares, run once after the last round:
    `summary.json` gets `context_attack_accuracy` ({size: %}) and `context_attack_samples_for_90`.
    Empty (default) = off; only for strategies that share data-derived items, on images."""


@dataclass
class CheckpointConfig:
    every: int = ruled(1, NON_NEGATIVE)
    """Keep the latest state in `checkpoint.pt` (one file, overwritten atomically) every `every`
    rounds, so a killed run can be resumed; 0 = never."""


@dataclass
class ServerDataConfig:
    """Data the server holds: carved, class-balanced, from the training set before the
    clients' partition (FedAvg-FT's labelled set; FedKT's and FedBE's public inputs)."""

    size: int = ruled(0, NON_NEGATIVE)
    """Training samples the server takes (0 = none)."""
    labelled: bool = ruled(True, ANY)
    """False: the server may use the inputs only."""


@dataclass
class SimulationConfig:
    """Everything the engine needs besides the strategy, the data and the model."""

    rounds: int = ruled(20, COUNT)
    """Communication rounds (the global default; a one-shot strategy runs 1)."""
    seed: int = ruled(0, Rule(low=0, high=SEED_LIMIT, high_open=True))
    device: str = ruled("auto", ANY)
    """auto, cpu, cuda or cuda:N (checked when the run picks its device)."""
    memory_format: str = ruled("auto", Rule(choices=MEMORY_FORMATS))
    """How the models store 4-d (convolution) weights: `auto` = channels-last for every model
    that has a convolution (measured faster for every conv model of the zoo, on CPU and GPU:
    docs/performance.md), `channels_last`, or `contiguous` (PyTorch's default). Results agree
    up to floating-point rounding; the flat weight vectors that cross the network are the same
    either way."""
    progress: bool = ruled(True, ANY)
    clients: ClientsConfig = field(default_factory=ClientsConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)


def unset_fields(cls: type, name: str) -> type:
    """A copy of dataclass `cls` whose fields are all optional and None (= not set here), so
    the layers of defaults below the command line can fill what the user did not set."""
    return make_dataclass(
        name,
        [
            (
                f.name,
                # the schema's fields are real types (no string annotations in this module)
                f.type if f.type is Any else cast(type, f.type) | None,
                field(default=None, metadata={RULE: replace(f.metadata[RULE], optional=True)}),
            )
            for f in fields(cls)
        ],
        namespace={"__doc__": f"{cls.__name__} with every field unset (None) by default."},
    )


TrainSettings = unset_fields(TrainConfig, "TrainSettings")


@dataclass
class RunConfig(SimulationConfig):
    """The Hydra schema of one command-line run: simulation settings plus the four choices.

    `rounds` and the `train` keys are None unless a preset or the command line sets them; the
    run fills them from the strategy, then the dataset, then the global defaults
    (`fedshare.config.defaults`).
    """

    rounds: int | None = ruled(None, Rule(low=1, optional=True))  # type: ignore[assignment]
    train: TrainSettings = field(default_factory=TrainSettings)  # type: ignore[valid-type]
    strategy: Any = ruled(None, ANY)
    """The config groups check their own keys (`fedshare.config.validation.check_groups`)."""
    data: Any = ruled(None, ANY)
    partition: Any = ruled(None, ANY)
    model: Any = ruled(None, ANY)
    run_dir: str | None = ruled(None, Rule(nonempty=True, optional=True))
    resume: bool = ruled(False, ANY)
    overwrite: bool = ruled(False, ANY)
    """Replace a run already in `run_dir` (the files a fedshare run wrote there are deleted)."""
    logger: Any = ruled(None, Rule(choices=LOGGER_NAMES, scalar_or_list=True, optional=True))
    """Experiment trackers (`fedshare.tracking`): tensorboard | wandb | mlflow, or a
    list of them, e.g. [tensorboard,mlflow]; null = none."""
    workers: int = ruled(1, Rule(low=1, high=MAX_WORKERS))
    """Processes that share each round's clients (`fedshare.engine.distributed`): K > 1 starts
    K processes on this machine through torch's launcher; under torchrun it must be 1 (the
    default) or torchrun's process count."""
    server_data: ServerDataConfig = field(default_factory=ServerDataConfig)
    tuned: str | None = ruled(None, Rule(nonempty=True, optional=True))
    """A file written by `python -m fedshare.tune`: its parameters apply before the command
    line's own, and `summary.json` records how they were tuned (`fedshare.tune.tuned`)."""


@dataclass
class DataOptions:
    """The keys every dataset accepts on top of its own (`fedshare.data.datasets.COMMON_KEYS`;
    `load_dataset` documents them)."""

    name: str = ruled("digits", ANY)
    root: str | None = ruled(None, Rule(nonempty=True, optional=True))
    download: bool = ruled(False, ANY)
    cache: bool = ruled(True, ANY)
    class_subset: int | None = ruled(None, Rule(low=1, optional=True))
    train_subset: int | None = ruled(None, Rule(low=1, optional=True))
    test_subset: int | None = ruled(None, Rule(low=1, optional=True))
    normalize: bool = ruled(True, ANY)
    mean: list[float] | None = ruled(None, Rule(numbers=True, nonempty=True, optional=True))
    std: list[float] | None = ruled(
        None, replace(POSITIVE, numbers=True, nonempty=True, optional=True)
    )
    augment: bool = ruled(True, ANY)
    features: str | None = ruled(None, ANY)
    features_weights: str | None = ruled(None, ANY)
    features_options: dict[str, Any] | None = ruled(None, ANY)
    val_fraction: float = ruled(0.0, Rule(low=0, high=1, high_open=True))
    """Share of each client's (and the server's) training samples held out as the validation
    split (`fedshare.data.validation`); 0 = none."""
