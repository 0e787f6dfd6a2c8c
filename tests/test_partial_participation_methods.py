"""Partial participation (issue 46 §3): the state a method carries across rounds, recomputed
by hand from the recorded messages of runs where each round's cohort leaves clients out.

Five digits clients of unequal sizes, two a round, three rounds: a statistic that divides by
the total instead of the cohort (or the reverse), reads a non-participant, or keeps a stale
upload differs from the hand computation. SCAFFOLD's control variates and FedDyn's h are
checked the same way in tests/test_scaffold_feddyn.py (`tiny_run`, the same setting).
"""

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from itertools import pairwise

import pytest
import torch
from torch import nn

from fedshare import simulate
from fedshare.data import federate, load_dataset
from fedshare.engine.callbacks import Callback
from fedshare.engine.messages import Message, Update
from fedshare.functional.class_gaussians import class_statistics
from fedshare.functional.sparse import unpack
from fedshare.models.base import HEAD, BlockModel
from fedshare.strategies import STRATEGIES, make_strategy
from fedshare.strategies.base import Strategy
from fedshare.strategies.fedgen import COUNTS, PRIOR
from fedshare.strategies.fedkd import factor_flat, unfactor_flat
from helpers import FULL_BATCH

ATOL = 1e-6
ROUNDS = 3
ONE_EPOCH = {**FULL_BATCH, "local_epochs": 1}
SPLIT = {"name": "dirichlet", "alpha": 0.3}
"""Five clients of unequal sizes, most of them missing some classes."""


def clone(t):
    return {k: v.detach().clone() for k, v in t.items()} if isinstance(t, dict) else t


@dataclass
class Exchange:
    """One phase of one round: what the server broadcast, the updates it aggregated (copies),
    and the client states the engine holds once the round is over."""

    round: int
    phase: str
    broadcast: Message
    updates: list[Update] = field(default_factory=list)
    personal: list[int] = field(default_factory=list)
    """The clients a message addressed to them alone went to (`Phase.personal`)."""

    @property
    def cohort(self) -> list[int]:
        return [u.client_id for u in self.updates]


def copy_message(m: Message) -> Message:
    return Message(None if m.weights is None else m.weights.clone(), clone(m.payload))


def copy_update(u: Update) -> Update:
    weights = None if u.weights is None else u.weights.detach().clone()
    return replace(u, weights=weights, payload=clone(u.payload), metrics=dict(u.metrics))


def record(strategy: Strategy) -> list[Exchange]:
    """Wrap `strategy`'s phases so that every broadcast and every aggregated update is kept."""
    log: list[Exchange] = []
    own_phases = strategy.phases

    def phases():
        wrapped = []
        for phase in own_phases():

            def broadcast(round_idx: int, phase=phase) -> Message:
                message = phase.broadcast(round_idx)
                log.append(Exchange(round_idx, phase.name, copy_message(message)))
                return message

            def aggregate(updates: Iterable[Update], round_idx: int, phase=phase) -> None:
                updates = list(updates)
                log[-1].updates = [copy_update(u) for u in updates]
                phase.aggregate(updates, round_idx)

            def personal(round_idx: int, client_id: int, phase=phase) -> Message | None:
                message = phase.personal(round_idx, client_id)
                if message is not None:
                    log[-1].personal.append(client_id)
                return message

            wrapped.append(
                replace(
                    phase,
                    broadcast=broadcast,
                    aggregate=aggregate,
                    personal=phase.personal and personal,
                )
            )
        return wrapped

    strategy.phases = phases  # type: ignore[method-assign]
    return log


class ClientStates(Callback):
    """Copies of every client's kept state after each round."""

    def __init__(self) -> None:
        self.rounds: list[dict[int, dict[str, torch.Tensor]]] = []

    def on_round_end(self, sim, record) -> None:
        self.rounds.append({cid: clone(dict(s)) for cid, s in sim.client_states.items()})


def small_mlp() -> BlockModel:
    torch.manual_seed(0)
    return BlockModel(
        [
            ("fc1", nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU())),
            ("fc2", nn.Sequential(nn.Linear(16, 16), nn.ReLU())),
            (HEAD, nn.Linear(16, 10)),
        ],
        flea_layer=1,
    )


HEAD_START = 64 * 16 + 16 + 16 * 16 + 16
"""Where `small_mlp`'s head starts in its flat weights (after fc1's and fc2's)."""


def linear() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 10))


def partial_run(
    strategy: Strategy,
    model: Callable[[], nn.Module] = small_mlp,
    train: dict = FULL_BATCH,
    rounds: int = ROUNDS,
    server_size: int = 0,
) -> tuple[list[Exchange], ClientStates]:
    data = load_dataset({"name": "digits"})
    fed = federate(data, SPLIT, 5, 0, server_size=server_size)
    sizes = fed.client_sizes
    assert len(set(sizes)) == len(sizes)
    log, states = record(strategy), ClientStates()
    simulate(
        strategy,
        fed,
        model(),
        rounds=rounds,
        train=train,
        clients={"per_round": 2},
        callbacks=[states],
        eval={"every": rounds},
    )
    cohorts = [e.cohort for e in phase(log, "train")]
    assert all(len(c) == 2 for c in cohorts) and len({k for c in cohorts for k in c}) > 2
    return log, states


def phase(log: list[Exchange], name: str) -> list[Exchange]:
    return [e for e in log if e.phase == name]


# ------------------------------------------------------------------ server optimizers' moments
def cohort_mean(updates: list[Update]) -> torch.Tensor:
    """Σ_S n_k y_k / Σ_S n_k: the sample-weighted mean of the cohort's uploads."""
    n = torch.tensor([float(u.num_samples) for u in updates], dtype=torch.float64)
    y = torch.stack([u.weights.double() for u in updates])
    return (n[:, None] * y).sum(0) / n.sum()


def fedopt_by_hand(name: str, s: Strategy, log: list[Exchange]) -> dict[str, torch.Tensor]:
    """Reddi et al.'s Alg. 2 (FedAdagrad/FedAdam/FedYogi) or Hsu et al.'s §3 momentum (FedAvgM)
    on Δ_t = cohort mean − x_t, in float64, round after round."""
    x = log[0].broadcast.weights.double()
    m = torch.zeros_like(x)
    v = torch.full_like(x, getattr(s, "v0", 0.0))
    velocity = torch.zeros_like(x)
    for exchange in log:
        assert torch.allclose(exchange.broadcast.weights.double(), x, atol=ATOL)
        delta = cohort_mean(exchange.updates) - x
        if name == "fedavgm":
            velocity = s.momentum * velocity - delta
            x = x - s.server_lr * velocity
            continue
        m = s.beta1 * m + (1 - s.beta1) * delta
        d2 = delta * delta
        if name == "fedadagrad":
            v = v + d2
        elif name == "fedadam":
            v = s.beta2 * v + (1 - s.beta2) * d2
        else:
            v = v - (1 - s.beta2) * d2 * torch.sign(v - d2)
        x = x + s.eta * m / (v.sqrt() + s.tau)
    return {"x": x, "m": m, "v": v, "velocity": velocity}


@pytest.mark.parametrize("name", ["fedadagrad", "fedadam", "fedyogi", "fedavgm"])
def test_server_optimizer_state_follows_each_cohorts_mean_update(name):
    strategy = make_strategy(name, {"eta": 0.1} if name != "fedavgm" else {"momentum": 0.5})
    log, _ = partial_run(strategy, linear)
    expected = fedopt_by_hand(name, strategy, log)
    x = torch.cat([p.detach().reshape(-1) for p in strategy.model.parameters()])
    torch.testing.assert_close(x.double(), expected["x"], rtol=0, atol=ATOL)
    for key in strategy.state_names:
        torch.testing.assert_close(
            getattr(strategy, key).double(), expected[key], rtol=0, atol=ATOL
        )


# ------------------------------------------------------------------ prototypes and logits
def per_class(update: Update, num_classes: int = 10) -> tuple[torch.Tensor, torch.Tensor]:
    """A client's uploaded (C × d) rows and counts (0 where it sent nothing)."""
    classes = update.payload["proto_classes"]
    rows = torch.zeros(num_classes, update.payload["prototypes"].shape[1], dtype=torch.float64)
    counts = torch.zeros(num_classes, dtype=torch.float64)
    rows[classes] = update.payload["prototypes"].double()
    counts[classes] = (
        update.payload["proto_counts"].double() if "proto_counts" in update.payload else 1.0
    )
    return rows, counts


def uploaders_mean(updates: list[Update]) -> tuple[torch.Tensor, torch.Tensor]:
    """Σ_i w_{i,c} P_{i,c} / Σ_i w_{i,c} over this round's uploads (w: the class counts, or 1
    per uploading client where no counts travel), and the classes someone sent."""
    total = torch.zeros(10, dtype=torch.float64)
    sums = None
    for update in (u for u in updates if "proto_classes" in u.payload):
        rows, counts = per_class(update)
        sums = counts[:, None] * rows if sums is None else sums + counts[:, None] * rows
        total += counts
    return sums / total.clamp_min(1e-12)[:, None], total > 0


@pytest.mark.parametrize("name", ["fedproto", "fd"])
def test_global_prototypes_are_this_rounds_uploads_only(name):
    """FedProto's C̄^(j) (count-weighted, Alg. 1) and FD's global average logits (unweighted
    across the devices that hold the label, §2): the next broadcast holds exactly the classes
    this round's cohort sent, averaged over that cohort alone."""
    log, _ = partial_run(make_strategy(name))
    assert any(e.updates and "proto_counts" in e.updates[0].payload for e in log) == (
        name == "fedproto"
    )
    for sent, received in pairwise(log):
        expected, mask = uploaders_mean(sent.updates)
        classes = received.broadcast.payload["proto_classes"]
        assert torch.equal(classes, torch.nonzero(mask).flatten())
        got = received.broadcast.payload["prototypes"].double()
        torch.testing.assert_close(got, expected[classes], rtol=0, atol=ATOL)
    assert not all(bool(uploaders_mean(e.updates)[1].all()) for e in log)  # a class was missing


@pytest.mark.parametrize("memory", ["none", "last"])
def test_rebafl_prototypes_and_weights_come_from_the_active_clients(memory):
    """ReBaFL's Algorithm 1 (Eq. 23): the count-weighted mean of the prototypes the active
    clients sent, and the sample-weighted mean of their models; a class nobody reported has no
    prototype (`prototype_memory=none`, Sec. 4.3) or keeps its last one (`last`)."""
    strategy = make_strategy("rebafl", {"prototype_memory": memory})
    log, _ = partial_run(strategy, small_mlp, ONE_EPOCH, rounds=6)
    final = Message(None, {"proto_classes": torch.nonzero(strategy.proto_mask).flatten()})
    final.payload["prototypes"] = strategy.prototypes[strategy.proto_mask]
    received = [e.broadcast for e in log[1:]] + [final]
    kept = torch.zeros(10, 16, dtype=torch.float64)
    held = torch.zeros(10, dtype=torch.bool)
    dropped_out = False  # a class reported earlier that the next cohort did not report
    for sent, message in zip(log, received, strict=True):
        if message is not final:
            torch.testing.assert_close(
                message.weights.double(), cohort_mean(sent.updates), rtol=0, atol=ATOL
            )
        new, mask = uploaders_mean(sent.updates)
        dropped_out |= bool((held & ~mask).any())
        if memory == "last":
            new, mask = torch.where(mask[:, None], new, kept), mask | held
        kept, held = new, mask
        classes = message.payload["proto_classes"]
        assert torch.equal(classes, torch.nonzero(mask).flatten())
        got = message.payload["prototypes"].double()
        torch.testing.assert_close(got, new[classes], rtol=0, atol=ATOL)
    assert dropped_out


@pytest.mark.parametrize("name", ["fedgh", "fedtgp"])
def test_server_trains_on_this_rounds_uploaded_prototypes_alone(name, monkeypatch):
    """FedGH's header (Alg. 1) and FedTGP's trainable prototypes (Eq. 5) learn from the
    prototypes the round's cohort uploaded, each (class, prototype) once, nothing older."""
    module = __import__(f"fedshare.strategies.{name}", fromlist=["prototype_batches"])
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    own = module.prototype_batches

    def spy(protos, labels, *args, **kwargs):
        seen.append((protos.detach().clone(), labels.clone()))
        return own(protos, labels, *args, **kwargs)

    monkeypatch.setattr(module, "prototype_batches", spy)
    log, _ = partial_run(make_strategy(name), small_mlp, ONE_EPOCH)
    assert len(seen) == len(log)
    for (protos, labels), exchange in zip(seen, log, strict=True):
        sent = [u.payload for u in exchange.updates]
        torch.testing.assert_close(protos, torch.cat([p["prototypes"] for p in sent]))
        assert torch.equal(labels, torch.cat([p["proto_classes"] for p in sent]))


def test_ccvr_pools_every_clients_statistics_after_the_last_round():
    """CCVR (§4, "Feature distribution estimation"): after training, every client (not only
    the last cohort) sends N_{c,k}, μ_{c,k}, Σ_{c,k}; the pooled μ_c and Σ_c are the mean and
    unbiased covariance of all clients' features of class c under the final model."""
    strategy = make_strategy("ccvr")
    log, _ = partial_run(strategy, small_mlp, ONE_EPOCH)
    calibrations = [e for e in phase(log, "calibrate") if e.updates]
    assert [(e.round, sorted(e.cohort)) for e in calibrations] == [(ROUNDS - 1, [0, 1, 2, 3, 4])]
    assert len(phase(log, "train")[-1].cohort) == 2
    data = strategy.data
    everyone = torch.cat(list(data.client_indices))
    x, y = data.dataset.train_batch(everyone)
    with torch.no_grad():
        features = strategy.model.eval().features(x)
    expected = class_statistics(features, y)
    got = strategy.class_gaussians
    assert torch.equal(got.classes, expected.classes) and torch.equal(got.counts, expected.counts)
    torch.testing.assert_close(got.means, expected.means, rtol=0, atol=1e-5)
    torch.testing.assert_close(got.covariances, expected.covariances, rtol=0, atol=1e-5)


def test_dsfl_adds_the_cohorts_weighted_mean_of_sparse_updates_and_keeps_residuals_local():
    """Top-K sparsified FedAvg: θ_{t+1} = θ_t + Σ_S n_k·sparse(Δ_k) / Σ_S n_k; with error
    feedback each client's dropped residual is its own state, moved only when it trains."""
    log, states = partial_run(make_strategy("dsfl", {"error_feedback": True}), small_mlp, ONE_EPOCH)
    for sent, received in pairwise(log):
        theta = sent.broadcast.weights.double()
        n = torch.tensor([float(u.num_samples) for u in sent.updates], dtype=torch.float64)
        deltas = torch.stack([unpack(u.weights, theta.numel()).double() for u in sent.updates])
        expected = theta + (n[:, None] * deltas).sum(0) / n.sum()
        got = received.broadcast.weights.double()
        torch.testing.assert_close(got, expected, rtol=0, atol=ATOL)
    residuals: dict[int, torch.Tensor] = {}
    for exchange, kept in zip(log, states.rounds, strict=True):
        for u in exchange.updates:
            sent_entries = unpack(u.weights, exchange.broadcast.weights.numel()) != 0
            assert not kept[u.client_id]["residual"][sent_entries].any()  # sent, so not kept
            residuals[u.client_id] = kept[u.client_id]["residual"]
        assert {c: kept[c]["residual"] for c in kept}.keys() == residuals.keys()
        for cid, residual in residuals.items():
            assert torch.equal(kept[cid]["residual"], residual)


def test_fedgen_prior_counts_every_upload_and_the_generator_this_rounds_heads():
    """FedGen (Zhu et al. 2021, Eq. 4 and Alg. 1): p̂(y) is proportional to every label count
    received so far; the generator of round t weighs the round's heads by that round's counts
    α_{k,y} alone."""
    strategy = make_strategy("fedgen", {"generator_steps": 2})
    seen: list[torch.Tensor] = []
    own = strategy.train_generator

    def spy(heads, counts, round_idx):
        seen.append(counts.clone())
        return own(heads, counts, round_idx)

    strategy.train_generator = spy
    log, _ = partial_run(strategy, small_mlp, ONE_EPOCH)
    totals = torch.zeros(10, dtype=torch.float64)
    for exchange, counts, received in zip(log, seen, log[1:], strict=False):
        round_counts = torch.stack([u.payload[COUNTS].long() for u in exchange.updates])
        assert torch.equal(counts, round_counts)
        totals += round_counts.sum(0).double()
        prior = received.broadcast.payload[PRIOR].double()
        torch.testing.assert_close(prior, totals / totals.sum(), rtol=0, atol=ATOL)
    assert len(seen) == ROUNDS


def test_fedaa_identifiers_go_to_the_rounds_cohort_and_its_second_pass_is_the_model():
    """FedAA's Algorithm 4: the identifiers I_k are trained for, and sent to, the clients of
    phase A only (phase C is the same cohort), and the round's model is the n_k-weighted mean
    of their second-pass models (phase D)."""
    short = {"adv_per_label": 2, "adv_max_iter": 5, "identifier_epochs": 1, "finetune_epochs": 1}
    log, _ = partial_run(make_strategy("fedaa", short), small_mlp, ONE_EPOCH)
    trains, seconds = phase(log, "train"), phase(log, "second")
    assert len(trains) == len(seconds) == ROUNDS
    for first, second in zip(trains, seconds, strict=True):
        assert second.cohort == first.cohort == second.personal
    for second, next_round in zip(seconds, trains[1:], strict=False):
        got = next_round.broadcast.weights.double()
        torch.testing.assert_close(got, cohort_mean(second.updates), rtol=0, atol=ATOL)


def test_fedkd_mentee_is_the_cohorts_mean_of_the_decompressed_uploads():
    """FedKD (Wu et al. 2022, §Methods, with HtFLlib's weight factoring): the server averages
    the cohort's decompressed mentees (sample-weighted) and sends the mean back factored at the
    next round's energy."""
    strategy = make_strategy("fedkd")
    log, _ = partial_run(strategy, small_mlp, ONE_EPOCH)
    flat = strategy.flat
    means = []
    for exchange in log:
        n = torch.tensor([float(u.num_samples) for u in exchange.updates], dtype=torch.float64)
        ups = torch.stack([unfactor_flat(flat, u.payload).double() for u in exchange.updates])
        means.append((n[:, None] * ups).sum(0) / n.sum())
    for mean, received in zip(means, log[1:], strict=False):
        energy = float(received.broadcast.payload["energy"])
        sent = {k: v for k, v in received.broadcast.payload.items() if k != "energy"}
        expected = unfactor_flat(flat, factor_flat(flat, mean.float(), energy))
        torch.testing.assert_close(unfactor_flat(flat, sent), expected, rtol=0, atol=ATOL)
    final = flat.flatten(strategy.model).double()
    torch.testing.assert_close(final, means[-1], rtol=0, atol=ATOL)


# ------------------------------------------------------------------ FLea's feature buffer
def test_flea_buffer_is_the_last_cohorts_activations():
    """FLea's Sec. 3.2: the buffer F^(t+1) is the activations the round-t cohort extracted
    under the new global model, nothing older; it travels with the next round's weights."""
    strategy = make_strategy("flea", {"share_fraction": 0.2})
    log, _ = partial_run(strategy, small_mlp, train=ONE_EPOCH)
    shares, trains = phase(log, "share"), phase(log, "train")
    assert len(shares) == ROUNDS
    for share, train, following in zip(shares, trains, trains[1:], strict=False):
        assert share.cohort == train.cohort
        uploads = [u for u in share.updates if u.payload]
        assert len(uploads) == 2
        sent = following.broadcast.payload
        features = torch.cat([u.payload["features"] for u in uploads])
        torch.testing.assert_close(sent["features"], features, rtol=0, atol=0)
        assert torch.equal(sent["labels"], torch.cat([u.payload["labels"] for u in uploads]))
    assert strategy.buffer_owners == shares[-1].cohort


# ------------------------------------------------------------------ per-client state
CLIENT_STATE = {
    "centralized",
    "fd",
    "fedbr",
    "feddyn",
    "fedgh",
    "fedkd",
    "fedmrl",
    "fedproto",
    "fedtgp",
    "fml",
    "lg_fedavg",
    "local_only",
    "moon",
    "scaffold",
}
"""The multi-round strategies whose clients keep state between participations (FedBN's is
its BatchNorm layers: `test_fedbn_...` below, on a model that has some)."""

COHORT_MEAN = {
    "bsm_fedavg",
    "ccvr",
    "feature_recalibration",
    "fedavg",
    "fedbabu",
    "fedbn",
    "fedbr",
    "feddata",
    "feddecorr",
    "fedgen",
    "fedgen_input",
    "fedlc",
    "fedmix",
    "fedmrl",
    "fedntd",
    "fedprox",
    "fedrs",
    "flea",
    "fml",
    "lg_fedavg",
    "moon",
    "rebafl",
    "scaffold",
}
"""Strategies whose next broadcast weights are the sample-weighted mean of what the round's
cohort uploaded (FedAvg's Alg. 1 step, or the shared part of it: FedBN's non-BN entries,
LG-FedAvg's global layers, FML's meme and FedMRL's shared model; SCAFFOLD at its global rate
1); FedAvg-FT's body (its head is re-trained after the mean). The server optimizers, FedDyn
and FedAA step further, checked in their own tests."""

STATELESS_SHORT = {"fedaa": {"adv_per_label": 2, "adv_max_iter": 5, "identifier_epochs": 1}}


def multi_round() -> list[str]:
    return sorted(n for n in STRATEGIES.names() if not make_strategy(n).one_shot)


@pytest.mark.parametrize("name", multi_round())
def test_only_the_cohort_moves_client_state_and_the_global_mean(name):
    """A client's kept state changes only in a round it takes part in; where the server's
    model is the cohort's sample-weighted mean, the next broadcast is exactly that mean."""
    if name in {"fedpft_chain", "kd"}:
        pytest.skip("a chain: every client takes part every round")
    strategy = make_strategy(name, STATELESS_SHORT.get(name))
    server = 100 if name == "fedavg_ft" else 0
    log, states = partial_run(strategy, small_mlp, ONE_EPOCH, ROUNDS, server)
    cohorts = [{c for e in log if e.round == r for c in e.cohort} for r in range(ROUNDS)]
    trained = [set(e.cohort) for e in phase(log, "train")]
    assert bool(states.rounds[-1]) == (name in CLIENT_STATE), sorted(states.rounds[-1])
    before: dict[int, dict[str, torch.Tensor]] = {}
    for cohort, trainers, after in zip(cohorts, trained, states.rounds, strict=True):
        for cid in set(before) | set(after):
            old, new = before.get(cid, {}), after.get(cid, {})
            same = old.keys() == new.keys() and all(torch.equal(old[k], new[k]) for k in old)
            assert same or cid in cohort, f"client {cid} changed without taking part"
        assert trainers <= set(after) or not after
        before = after
    train = phase(log, "train")
    for sent, received in pairwise(train if name in {*COHORT_MEAN, "fedavg_ft"} else []):
        got, mean = received.broadcast.weights.double(), cohort_mean(sent.updates)
        if name in COHORT_MEAN:
            torch.testing.assert_close(got, mean, rtol=0, atol=ATOL)
        elif name == "fedavg_ft":  # the body is the mean, the head is re-trained after it
            body = HEAD_START
            torch.testing.assert_close(got[:body], mean[:body], rtol=0, atol=ATOL)
            assert not torch.allclose(got[body:], mean[body:], atol=ATOL)


def test_moon_keeps_each_clients_own_last_upload_as_its_previous_model():
    """MOON's z_prev (Sec. 3.3, Alg. 1): the client's local model of its last participation,
    which is what it uploaded then; clients that sat a round out keep the older one."""
    log, states = partial_run(make_strategy("moon"), small_mlp, ONE_EPOCH)
    last: dict[int, torch.Tensor] = {}
    for exchange, kept in zip(log, states.rounds, strict=True):
        last.update({u.client_id: u.weights for u in exchange.updates})
        assert set(kept) == set(last)
        for cid, weights in last.items():
            torch.testing.assert_close(kept[cid]["prev"], weights, rtol=0, atol=0)


def test_fedbn_clients_keep_the_batchnorm_of_their_own_last_training():
    """FedBN (Li et al. 2021, Alg. 1): BN layers stay local, so a client's BN state after the
    round is the one it trained, and its upload carries none of it."""

    def bn_mlp() -> BlockModel:
        torch.manual_seed(0)
        body = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.BatchNorm1d(16), nn.ReLU())
        return BlockModel([("fc", body), (HEAD, nn.Linear(16, 10))])

    log, states = partial_run(make_strategy("fedbn"), bn_mlp, ONE_EPOCH)
    bn_size = 16 * 4  # weight, bias, running mean, running variance
    seen: dict[int, torch.Tensor] = {}
    for exchange, kept in zip(log, states.rounds, strict=True):
        assert all(
            u.weights.numel() == exchange.broadcast.weights.numel() for u in exchange.updates
        )
        for u in exchange.updates:
            assert kept[u.client_id]["bn"].numel() == bn_size
            assert u.client_id not in seen or not torch.equal(
                seen[u.client_id], kept[u.client_id]["bn"]
            )
            seen[u.client_id] = kept[u.client_id]["bn"]
        for cid, bn in seen.items():
            assert torch.equal(kept[cid]["bn"], bn)
