"""FedBE and FedKT (FedPFT's Table 5 baselines, specs/fedpft.md §4.3): one-shot heads distilled
on the server's unlabelled inputs; what they need, what they send, and their targets."""

import pytest
import torch

from fedshare import simulate
from fedshare.data import federate, load_dataset
from fedshare.strategies import make_strategy
from fedshare.strategies._server_distillation import ProbabilityMean
from fedshare.strategies.fedkt import majority_vote

TRAIN = {"optimizer": "adam", "lr": 0.01, "batch_size": 64, "local_epochs": 20}


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
