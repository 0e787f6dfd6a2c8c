"""FedBE and FedKT (FedPFT's Table 5 baselines, Sec. 5.1 and App. D.1): one-shot heads distilled
on the server's unlabelled inputs; what they need, what they send, and their targets."""

import math

import pytest
import torch

from fedshare import simulate
from fedshare.data import federate, load_dataset
from fedshare.engine.messages import Update
from fedshare.engine.rng import torch_generator
from fedshare.engine.training import fit
from fedshare.strategies import make_strategy
from fedshare.strategies._feature_heads import IterateAverage, extract, fresh_head, head_vector
from fedshare.strategies._server_distillation import ProbabilityMean
from fedshare.strategies.fedbe import dirichlet_heads, gaussian_heads
from fedshare.strategies.fedkt import majority_vote

TRAIN = {"optimizer": "adam", "lr": 0.01, "batch_size": 64, "local_epochs": 5}


def features_federation(server: int = 200):
    data = load_dataset(
        {"name": "digits", "features": "random_relu", "features_options": {"dim": 64}},
    )
    return federate(
        data, {"name": "dirichlet", "alpha": 0.3}, 6, 0, server_size=server, server_labelled=False
    )


def run(name, params=None, fed=None):
    return simulate(
        make_strategy(name, params), fed or features_federation(), "linear", train=TRAIN
    )


def test_they_need_server_data_and_refuse_the_peer_topology():
    with pytest.raises(Exception, match=r"set server_data\.size"):
        run("fedbe", fed=features_federation(server=0))
    with pytest.raises(Exception, match="to_last_client=false"):
        run("fedkt", {"to_last_client": True})


def test_no_distillation_leaves_the_mean_head_and_the_bytes_are_one_shot_averagings():
    fed = features_federation()
    mean = run("oneshot_avg", fed=fed)
    be = run("fedbe", {"distill_epochs": 0}, fed=fed)
    assert torch.equal(mean.strategy.head.weight, be.strategy.head.weight)
    assert be.summary["bytes_up"] == mean.summary["bytes_up"]
    assert be.summary["bytes_down"] == mean.summary["bytes_down"]
    distilled = run("fedbe", fed=fed)
    assert distilled.history[-1]["teachers"] == 6 + 1 + 15
    assert not torch.equal(distilled.strategy.head.weight, mean.strategy.head.weight)
    kt = run("fedkt", fed=fed)
    assert kt.history[-1]["teachers"] == 6
    for result in (distilled, kt):
        assert result.final_accuracy > 30.0  # digits, 10 classes: far above chance


def test_targets_the_ensemble_mean_probability_and_the_majority_vote():
    heads = [torch.nn.Linear(3, 4) for _ in range(3)]
    x = torch.randn(5, 3)
    expected = torch.stack([h(x).softmax(-1) for h in heads]).mean(0)
    assert torch.allclose(ProbabilityMean(heads)(x).softmax(-1), expected, atol=1e-6)
    votes = torch.tensor([[0, 1, 2, 3], [1, 1, 2, 0], [1, 2, 3, 3]])
    assert majority_vote(votes, 4).tolist() == [1, 1, 2, 3]
    assert majority_vote(torch.tensor([[2], [1]]), 4).tolist() == [1]  # a tie: smaller id


def test_a_class_every_teacher_rules_out_keeps_a_finite_target():
    """A probability that underflows to 0 in every teacher is floored at 1e-12: the target's
    logit is log 1e-12, not −inf (which would make the distillation's KL nan)."""
    head = torch.nn.Linear(2, 2)
    with torch.no_grad():
        head.weight.zero_()
        head.bias.copy_(torch.tensor([0.0, -200.0]))  # exp(−200) is 0 in float32
    got = ProbabilityMean([head, head])(torch.randn(3, 2))
    torch.testing.assert_close(got, torch.tensor([0.0, math.log(1e-12)]).expand(3, 2))


# ----------------------------------------------------------- FedBE's global model distribution
def convex_weights(vectors: torch.Tensor, sample: torch.Tensor) -> torch.Tensor:
    """γ with sample = Σ γ_i vectors_i (least squares; exact for independent vectors)."""
    return torch.linalg.lstsq(vectors.T.double(), sample.double()[:, None]).solution[:, 0]


def test_dirichlet_samples_are_convex_combinations_of_the_client_heads():
    vectors = torch.randn(4, 30)  # 4 independent client heads
    gen = torch.Generator().manual_seed(0)
    drawn = dirichlet_heads(vectors, 1.0, 400, gen)
    gammas = torch.stack([convex_weights(vectors, s) for s in drawn])
    assert torch.allclose(gammas @ vectors.double(), drawn.double(), atol=1e-4)  # in the span
    assert (gammas > -1e-6).all() and torch.allclose(gammas.sum(1), torch.ones(400).double())
    # Dir(1·1) is uniform on the simplex: every client weighs 1/I on average, var (I-1)/(I²(I+1))
    assert torch.allclose(gammas.mean(0), torch.full((4,), 0.25).double(), atol=0.03)
    assert abs(float(gammas.var(0).mean()) - 3 / 80) < 0.01
    # small α concentrates each sample near one client's head
    sparse = torch.stack(
        [convex_weights(vectors, s) for s in dirichlet_heads(vectors, 0.05, 200, gen)]
    )
    assert float(sparse.max(1).values.mean()) > 0.85
    # the draws come from the run's generator: the same stream repeats them, another does not
    again = dirichlet_heads(vectors, 1.0, 400, torch.Generator().manual_seed(0))
    other = dirichlet_heads(vectors, 1.0, 400, torch.Generator().manual_seed(1))
    assert torch.equal(again, drawn) and not torch.allclose(other, drawn)


def test_gaussian_samples_have_the_heads_weighted_mean_and_variance():
    vectors = torch.tensor([[0.0, 1.0], [2.0, 1.0], [4.0, 7.0]])
    weights = torch.tensor([0.5, 0.25, 0.25])
    drawn = gaussian_heads(vectors, weights, 40000, torch.Generator().manual_seed(0))
    mean = torch.tensor([1.5, 2.5])  # Σ w_i v_i
    var = torch.tensor(
        [0.5 * 2.25 + 0.25 * 0.25 + 0.25 * 6.25, 0.5 * 2.25 + 0.25 * 2.25 + 0.25 * 20.25]
    )
    assert torch.allclose(drawn.mean(0), mean, atol=0.05)
    assert torch.allclose(drawn.var(0), var, rtol=0.03)


def test_fedbe_teachers_are_clients_mean_gaussian_and_dirichlet_heads():
    fed = features_federation()
    result = run("fedbe", {"distill_epochs": 0, "posterior": "both", "samples": 5}, fed=fed)
    strategy = result.strategy
    size = strategy.head.weight.numel() + strategy.head.bias.numel()
    clients = torch.randn(3, size)
    teachers = strategy.teachers([(v, 10.0) for v in clients])
    vectors = torch.stack([torch.cat([t.weight.flatten(), t.bias]) for t in teachers]).detach()
    assert len(teachers) == 3 + 1 + 5
    assert torch.equal(vectors[:3], clients)  # the clients' own heads first
    assert torch.allclose(vectors[3], head_vector(strategy.head, torch.float32))  # the mean
    gammas = torch.stack([convex_weights(clients, v) for v in vectors[4:]])
    residual = (gammas @ clients.double() - vectors[4:].double()).norm(dim=1)
    # ⌈5/2⌉ Gaussian draws leave the clients' span (dimension 3 of 650), 2 Dirichlet ones are in
    # the simplex spanned by the clients' heads
    assert (residual[:3] > 1.0).all()
    assert (residual[3:] < 1e-3).all() and (gammas[3:] > -1e-6).all()
    assert torch.allclose(gammas[3:].sum(1), torch.ones(2).double())
    dirichlet_only = run("fedbe", {"distill_epochs": 0, "posterior": "dirichlet"}, fed=fed)
    assert len(dirichlet_only.strategy.teachers([(v, 1.0) for v in clients])) == 3 + 1 + 15


@pytest.mark.parametrize(
    ("posterior", "samples", "counts"),
    [("both", 5, (3, 2)), ("both", 15, (8, 7)), ("gaussian", 4, (4, 0)), ("dirichlet", 4, (0, 4))],
)
def test_sample_counts_split_the_posterior_draws(posterior, samples, counts):
    assert make_strategy("fedbe", {"posterior": posterior, "samples": samples}).sample_counts() == (
        counts
    )


def test_fedbe_gaussian_teachers_follow_the_sample_weighted_heads():
    """Under the default `weighting=samples` the Gaussian is fitted with the clients' sample
    counts as weights (normalised): the drawn heads, standardised by that mean and spread, are
    N(0, 1) in every coordinate; under `uniform` with the plain mean and spread."""
    strategy = run("fedbe", {"distill_epochs": 0, "posterior": "gaussian", "samples": 200}).strategy
    size = strategy.head.weight.numel() + strategy.head.bias.numel()
    clients = torch.randn(3, size, generator=torch.Generator().manual_seed(1))
    for weighting, w in (("samples", [1.0, 2.0, 5.0]), ("uniform", [1.0, 1.0, 1.0])):
        strategy.weighting = weighting
        teachers = strategy.teachers(
            [(v, n) for v, n in zip(clients, (1.0, 2.0, 5.0), strict=True)]
        )
        drawn = torch.stack([torch.cat([t.weight.flatten(), t.bias]) for t in teachers[4:]])
        weights = torch.tensor(w)[:, None] / sum(w)
        mean = (weights * clients).sum(0)
        std = (weights * (clients - mean) ** 2).sum(0).sqrt()
        standard = (drawn - mean) / std
        assert len(drawn) == 200
        assert standard.mean(0).abs().max() < 0.35  # per coordinate: sd 0.07
        assert (standard.var(0) - 1).abs().max() < 0.5  # sd 0.1


def test_fedbe_distils_the_teachers_mean_probability_into_swa_from_the_chosen_step(monkeypatch):
    """distill: the teacher is the teachers' `ProbabilityMean`; SWA starts at
    max(1, ⌈swa_start · steps⌉) of steps = passes · ⌈inputs / batch⌉ and averages every
    `swa_every` steps; without SWA no average."""
    strategy = run("fedbe", {"distill_epochs": 0}).strategy
    strategy.passes = 3  # 200 server inputs, batches of 64: 4 steps a pass, 12 in all
    feats = torch.randn(200, 64)
    teachers = [torch.nn.Linear(64, 10) for _ in range(2)]
    seen = {}

    def fit(feats, labels, gen, teacher, average):
        seen.update(labels=labels, teacher=teacher, average=average)
        return torch.zeros(())

    monkeypatch.setattr(strategy, "fit", fit)
    for swa_start, every, start in ((0.3, 25, 4), (0.05, 3, 1), (0.0, 1, 1), (0.5, 2, 6)):
        strategy.swa_start, strategy.swa_every = swa_start, every
        strategy.distill(teachers, feats, torch.Generator())
        assert seen["labels"] is None and list(seen["teacher"].heads) == teachers
        assert (seen["average"].start, seen["average"].every) == (start, every)
    strategy.swa = False
    strategy.distill(teachers, feats, torch.Generator())
    assert seen["average"] is None


# ----------------------------------------------------------- SWA in the server's distillation
def test_swa_averages_the_iterates_at_the_chosen_steps():
    w = torch.nn.Linear(1, 1, bias=False)
    torch.nn.init.zeros_(w.weight)
    optimizer = torch.optim.SGD(w.parameters(), lr=0.1)
    average = IterateAverage(start=3, every=2)

    def loss(_):  # constant gradient 1: after step t the weight is −0.1·t
        return w.weight.sum()

    fit(optimizer, average.after_steps(iter(range(8)), w), loss)
    assert float(w.weight.detach()) == pytest.approx(-0.8)  # the last iterate
    average.load_into(w)
    assert float(w.weight.detach()) == pytest.approx(-0.1 * (3 + 5 + 7) / 3)  # steps 3, 5, 7
    assert average.count == 3


def test_swa_from_step_two_every_three_steps():
    """start 2, every 3: the 2nd, 5th and 8th of nine iterates (a schedule where step + start
    and step − start fall on different steps)."""
    w = torch.nn.Linear(1, 1, bias=False)
    torch.nn.init.zeros_(w.weight)
    average = IterateAverage(start=2, every=3)
    fit(
        torch.optim.SGD(w.parameters(), lr=0.1),
        average.after_steps(iter(range(9)), w),
        lambda _: w.weight.sum(),
    )
    average.load_into(w)
    assert float(w.weight.detach()) == pytest.approx(-0.1 * (2 + 5 + 8) / 3)


def test_fedbe_student_is_the_swa_average_and_reduces_to_the_last_iterate():
    fed = features_federation()
    plain = run("fedbe", {"swa": False}, fed=fed)
    swa = run("fedbe", fed=fed)
    last_only = run("fedbe", {"swa_start": 0.99999, "swa_every": 10**6}, fed=fed)
    assert torch.equal(last_only.strategy.head.weight, plain.strategy.head.weight)
    assert not torch.allclose(swa.strategy.head.weight, plain.strategy.head.weight, atol=1e-4)
    assert swa.final_accuracy > 30.0


# ----------------------------------------------------------- the server's step (both methods)
@pytest.mark.parametrize("student_init", ["mean", "fresh"])
def test_the_server_distils_its_features_from_the_mean_or_a_fresh_head_for_the_pooled_steps(
    monkeypatch, student_init
):
    """ServerDistillation.aggregate: the teachers are built from the heads with samples while
    `head` is their sample-weighted mean; the student starts there (`mean`) or at the seeded
    fresh head; it is distilled on the server's features for ⌈E·⌈N/B⌉ / ⌈S/B⌉⌉ passes (N the
    pooled sample count, S the server's inputs, B the batch); E = 0 distils nothing."""
    strategy = run("fedbe", {"distill_epochs": 0, "student_init": student_init}).strategy
    d, classes = strategy.head.in_features, strategy.head.out_features
    vectors = torch.randn(3, classes * d + classes, generator=torch.Generator().manual_seed(2))
    updates = [
        Update(0, 100, weights=vectors[0]),
        Update(1, 1, weights=vectors[1]),  # a head of one sample counts
        Update(2, 0, weights=vectors[2]),  # no samples: neither averaged nor a teacher
    ]
    mean = (100 * vectors[0] + vectors[1]) / 101
    seen = {}

    def teachers(heads):
        seen["heads"], seen["head_then"] = heads, head_vector(strategy.head, torch.float32)
        return ["t1", "t2"]

    def distill(teachers, feats, gen):
        seen.update(teachers=teachers, feats=feats, gen=gen.initial_seed())
        seen["start"] = head_vector(strategy.head, torch.float32)
        return torch.tensor(0.25)

    monkeypatch.setattr(strategy, "teachers", teachers)
    monkeypatch.setattr(strategy, "distill", distill)
    strategy.aggregate(updates, 0)  # distill_epochs = 0: the mean head only
    assert not seen and "teachers" not in strategy.round_metrics
    torch.testing.assert_close(head_vector(strategy.head, torch.float32), mean)

    strategy.distill_epochs = 5
    strategy.aggregate(updates, 0)
    assert [w for _, w in seen["heads"]] == [100.0, 1.0]
    assert all(torch.equal(v, u) for (v, _), u in zip(seen["heads"], vectors[:2], strict=True))
    torch.testing.assert_close(seen["head_then"], mean)
    x, _ = strategy.data.server_batch()
    assert torch.equal(seen["feats"], extract(strategy.model, x, strategy.l2_normalize))
    seed = strategy.config.seed
    assert seen["gen"] == torch_generator(seed, "fedbe/server").initial_seed()
    if student_init == "mean":
        torch.testing.assert_close(seen["start"], mean)
    else:
        fresh = fresh_head(d, classes, torch_generator(seed, "oneshot/head_init"), "cpu")
        torch.testing.assert_close(seen["start"], head_vector(fresh, torch.float32))
    # 101 pooled samples in batches of 64: 2 steps an epoch, 10 in all; 200 server inputs: 4 a
    # pass, so 3 passes
    assert strategy.passes == 3 and seen["teachers"] == ["t1", "t2"]
    assert strategy.round_metrics["teachers"] == 2
    assert strategy.round_metrics["distill_passes"] == 3
    assert strategy.round_metrics["distill_loss"] == 0.25
    strategy.head_budget = "epochs"  # E passes over the server's inputs
    strategy.aggregate(updates, 0)
    assert strategy.passes == 5
