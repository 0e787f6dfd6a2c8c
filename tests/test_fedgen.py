"""FedGen (Zhu et al., ICML 2021): a latent generator trained against the clients' heads weighted
by their label counts; generated features enter the head's loss alone."""

import copy

import pytest
import torch
import torch.nn.functional as F

from fedshare import simulate
from fedshare.config.api import init_model
from fedshare.engine.flat import FlatState
from fedshare.engine.rng import torch_generator
from fedshare.errors import FedshareError
from fedshare.functional.generative import (
    diversity_loss,
    ensemble_cross_entropy,
    label_weights,
    weighted_ensemble_logits,
)
from fedshare.strategies import FedAvg, FedGen, Update
from helpers import DIGITS_TRAIN, digits_federation

SKEWED = {"name": "pathological", "classes_per_client": 2, "per_class": 60}


def test_each_head_is_weighted_by_its_clients_share_of_the_label():
    counts = torch.tensor([[3, 0, 5], [1, 2, 0]])  # client 0 lacks class 1, client 1 class 2
    assert torch.equal(label_weights(counts), torch.tensor([[0.75, 0.0, 1.0], [0.25, 1.0, 0.0]]))
    logits = torch.randn(2, 3, 3)  # (heads, samples, classes)
    labels = torch.tensor([0, 1, 2])
    want = torch.stack(
        [
            0.75 * logits[0, 0] + 0.25 * logits[1, 0],  # label 0: both clients, 3 : 1
            logits[1, 1],  # label 1: client 1 alone
            logits[0, 2],  # label 2: client 0 alone
        ]
    )
    torch.testing.assert_close(weighted_ensemble_logits(logits, counts, labels), want)
    torch.testing.assert_close(
        ensemble_cross_entropy(logits, counts, labels), F.cross_entropy(want, labels)
    )


def test_a_class_nobody_holds_weighs_zero_and_a_single_sample_weighs_fully():
    counts = torch.tensor([[0, 1, 2], [0, 0, 2]])
    assert torch.equal(label_weights(counts), torch.tensor([[0.0, 1.0, 0.5], [0.0, 0.0, 0.5]]))


def test_diversity_loss_is_fedgens_exp_of_minus_the_mean_product_of_distances():
    """exp(−mean_{i,j} ‖x_i − x_j‖₁/dim_x · ‖ε_i − ε_j‖²/dim_ε), written out (widths 3 and 2,
    three samples)."""
    x = torch.tensor([[0.0, 1.0, 2.0], [1.0, 1.0, 0.0], [0.5, -1.0, 2.0]], requires_grad=True)
    noise = torch.tensor([[0.0, 1.0], [1.0, -1.0], [0.5, 0.5]])
    l1 = (x[:, None] - x[None]).abs().sum(-1) / 3
    squared = ((noise[:, None] - noise[None]) ** 2).sum(-1) / 2
    want = torch.exp(-(l1 * squared).sum() / 9)
    got = diversity_loss(x, noise)
    torch.testing.assert_close(got, want)
    (grad,) = torch.autograd.grad(got, x)
    (want_grad,) = torch.autograd.grad(want, x)
    torch.testing.assert_close(grad, want_grad)
    assert float(got.detach()) < 1.0  # spread outputs for spread noise lower it
    assert float(diversity_loss(x[:1].detach(), noise[:1])) == 1.0  # one sample: no pair apart


def strategy_after_one_round(**params) -> FedGen:
    fed = digits_federation(SKEWED, 10, 0)
    return simulate(
        FedGen(generator_steps=0, **params), fed, "cnn_small", rounds=1, seed=0, train=DIGITS_TRAIN
    ).strategy


def head_updates(strategy: FedGen, heads, counts) -> list[Update]:
    updates = []
    for k, (head, held) in enumerate(zip(heads, counts, strict=True)):
        model = copy.deepcopy(strategy.model)
        model.head.load_state_dict(head.state_dict())  # cnn_small's head is one Linear
        weights = strategy.flat.flatten(model)
        updates.append(Update(k, 300, weights=weights, payload={"label_counts": held}))
    return updates


def test_generator_steps_are_the_weighted_ensemble_ce_plus_diversity_written_out():
    """Two server steps, by hand: y ~ the round's counts, ẑ = G(y, ε), the loss
    CE(Σ_k n_{k,y}/n_y · h_k(ẑ), y) + η · L_div(ẑ, ε) and Adam on G; the reported loss is the
    steps' mean."""
    strategy = strategy_after_one_round(diversity_weight=0.5, generator_batch=6)
    strategy.generator_steps = 2
    torch.manual_seed(1)
    heads = [torch.nn.Linear(128, 10), torch.nn.Linear(128, 10)]
    counts = torch.tensor([[5, 0, 3] + [0] * 7, [1, 4, 0] + [0] * 7], dtype=torch.int32)
    generator = copy.deepcopy(strategy.generator).train()
    optimizer = torch.optim.Adam(generator.parameters(), lr=strategy.generator_lr)
    draws = torch_generator(0, "fedgen/server", 1)
    prior = torch.tensor([6.0, 4.0, 3.0] + [0.0] * 7) / 13
    losses = []
    for _ in range(2):
        y = torch.multinomial(prior, 6, replacement=True, generator=draws)
        noise = torch.randn((6, 32), generator=draws)
        z = generator(y, noise)
        ensemble = torch.stack(
            [
                sum(counts[k, c] / counts[:, c].sum() * heads[k](z[i]) for k in range(2))
                for i, c in enumerate(y.tolist())
            ]
        )
        l1 = (z[:, None] - z[None]).abs().sum(-1) / 128
        squared = ((noise[:, None] - noise[None]) ** 2).sum(-1) / 32
        loss = F.cross_entropy(ensemble, y) + 0.5 * torch.exp(-(l1 * squared).mean())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    assert set(y.tolist()) <= {0, 1, 2}
    strategy.aggregate(iter(head_updates(strategy, heads, counts)), 1)
    assert strategy.generator_loss == pytest.approx(sum(losses) / 2, rel=1e-5)
    # the first layer's bias feeds BatchNorm, which removes it: its gradient is rounding, and
    # Adam scales rounding to a full step
    mine = dict(generator.named_parameters())
    for name, value in strategy.generator.named_parameters():
        if name != "net.0.bias":
            torch.testing.assert_close(value, mine[name], msg=name)


def test_the_server_trains_the_generator_towards_what_the_weighted_heads_call_its_label():
    """Two clients whose heads each know half the classes (and say so in their counts): after
    the server's aggregation, the generated features of a label are that label for the head of
    the client that holds it."""
    fed = digits_federation(SKEWED, 10, 0)
    params = {"generator_steps": 0, "generator_lr": 1e-2}
    strategy = simulate(
        FedGen(**params), fed, "cnn_small", rounds=1, seed=0, train=DIGITS_TRAIN
    ).strategy
    strategy.generator_steps = 300
    torch.manual_seed(0)
    heads = [torch.nn.Linear(128, 10), torch.nn.Linear(128, 10)]
    halves = [torch.arange(10) < 5, torch.arange(10) >= 5]
    updates = []
    for k, (head, held) in enumerate(zip(heads, halves, strict=True)):
        model = copy.deepcopy(strategy.model)
        model.head.load_state_dict(head.state_dict())  # cnn_small's head is one Linear
        counts = (held * 60).to(torch.int32)
        updates.append(
            Update(k, 300, weights=strategy.flat.flatten(model), payload={"label_counts": counts})
        )
    strategy.aggregate(iter(updates), 1)
    generator = strategy.generator.eval()
    with torch.no_grad():
        z, y, _ = generator.sample(torch.full((10,), 0.1), 500, torch.Generator().manual_seed(0))
        own = torch.stack([heads[int(label >= 5)](z[i]) for i, label in enumerate(y)])
    assert (own.argmax(1) == y).float().mean() > 0.9


def model_and_batches():
    fed = digits_federation(SKEWED, 10, 0)
    model = init_model("cnn_small", fed, 0)
    x, y = fed.dataset.train_batch(fed.client_indices[0][:16])
    z = torch.randn(16, 128)
    y_gen = torch.randint(10, (16,))
    return model, x, y, z, y_gen


def grads(model, loss):
    model.zero_grad()
    loss.backward()
    return {
        n: torch.zeros_like(p) if p.grad is None else p.grad.clone()
        for n, p in model.named_parameters()
    }


def test_generated_features_enter_the_heads_loss_alone():
    model, x, y, z, y_gen = model_and_batches()
    strategy = FedGen(gen_weight=0.7)
    both = grads(model, strategy.generated_loss(model, x, y, z, y_gen))
    local = grads(model, F.cross_entropy(model(x), y))
    generated = grads(model, F.cross_entropy(model.head(z), y_gen))
    head = {n for n, _ in model.named_parameters() if n.startswith("blocks.head.")}
    assert head and head != set(both)
    for name in both:
        if name in head:  # CE(x) + 0.7 · CE(h(ẑ), ŷ)
            torch.testing.assert_close(both[name], local[name] + 0.7 * generated[name])
        else:  # the extractor sees the local batch only
            torch.testing.assert_close(both[name], local[name])


def test_clients_draw_labels_from_the_received_prior_and_features_for_those_labels():
    fed = digits_federation(SKEWED, 10, 0)
    result = simulate(
        FedGen(generator_steps=2), fed, "cnn_small", rounds=2, seed=0, train=DIGITS_TRAIN
    )
    strategy = result.strategy
    message = strategy.broadcast(2)
    prior = message.payload["label_prior"]
    counts = torch.stack(
        [torch.bincount(fed.dataset.y_train[i], minlength=10) for i in fed.client_indices]
    )
    torch.testing.assert_close(prior, counts.sum(0).float() / counts.sum())  # all counts seen
    only = torch.zeros(10)
    only[3] = 1.0
    message.payload["label_prior"] = only

    class OneClient:  # the client-side view generated_batches reads
        device = torch.device("cpu")

        def rng(self, purpose):
            return torch.Generator().manual_seed(5)

        def batches(self):
            return iter([(torch.zeros(4, 1, 8, 8), torch.zeros(4, dtype=torch.long))])

    ((_, _, z, y_gen),) = strategy.generated_batches(OneClient(), message)
    assert y_gen.tolist() == [3, 3, 3, 3]
    generator = strategy.generator.eval()
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        again, labels, _ = generator.sample(only, 4, gen)
    assert torch.equal(labels, y_gen) and torch.equal(again, z)


def test_round_zero_is_fedavg_and_counts_and_generator_are_counted():
    fed = digits_federation(SKEWED, 10, 0)
    fedgen = simulate(
        FedGen(generator_steps=3), fed, "cnn_small", rounds=3, seed=0, train=DIGITS_TRAIN
    )
    fedavg = simulate(
        FedAvg(),
        digits_federation(SKEWED, 10, 0),
        "cnn_small",
        rounds=3,
        seed=0,
        train=DIGITS_TRAIN,
    )
    assert fedgen.accuracies[0] == fedavg.accuracies[0]
    assert fedgen.accuracies[1:] != fedavg.accuracies[1:]
    clients = 10  # full participation, the default
    generator = FlatState(fedgen.strategy.generator).numel * 4 + 10 * 4  # G and p̂ (float32)
    counts = 10 * 4  # int32 per class
    assert fedgen.summary["bytes_shared"] == 3 * clients * counts + 2 * clients * generator
    assert fedgen.history[1]["generator_loss"] > 0


def test_bad_settings_name_the_value():
    with pytest.raises(
        FedshareError, match=r"strategy.hidden=0 is not valid: .* number in \[1, 65536\]"
    ):
        FedGen(hidden=0)
    with pytest.raises(FedshareError, match=r"generator_lr=0 is not valid: .* number > 0"):
        FedGen(generator_lr=0)


def test_resume_equals_the_uninterrupted_run(tmp_path):
    def run(rounds, run_dir, resume=False):
        fed = digits_federation(SKEWED, 10, 0)
        return simulate(
            FedGen(generator_steps=3),
            fed,
            "cnn_small",
            rounds=rounds,
            seed=0,
            train=DIGITS_TRAIN,
            run_dir=run_dir,
            resume=resume,
        )

    full = run(3, tmp_path / "full")
    run(2, tmp_path / "cut")
    resumed = run(3, tmp_path / "cut", resume=True)
    assert resumed.accuracies == full.accuracies
