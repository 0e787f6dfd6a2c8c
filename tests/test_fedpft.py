"""FedPFT and its one-shot baselines (docs/fedpft.md): communication formulas (Eqs. 9–11),
the engine's measured bytes against them, the strategies' contracts and errors, and a fast sanity
version of the Sec. 5 claims (the multi-seed claims are in test_fedpft_claims.py, slow tier)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedshare import simulate
from fedshare.config import TrainConfig
from fedshare.data import federate, load_dataset
from fedshare.errors import FedshareError
from fedshare.functional.gmm import component_params
from fedshare.strategies import make_strategy
from fedshare.strategies._feature_heads import IterateAverage, fit_head, fresh_head
from fedshare.strategies.fedpft import gmm_bytes, gmm_params, head_bytes, raw_feature_bytes
from helpers import without_wall_time

TRAIN = {"optimizer": "adam", "lr": 0.01, "batch_size": 256, "local_epochs": 20}
MIB = 2**20


@pytest.fixture(scope="module")
def mixture_data():
    return load_dataset(
        {"name": "synthetic_mixture", "dim": 8, "train_size": 600, "test_size": 300}
    )


@pytest.fixture(scope="module")
def digits64(tmp_path_factory):
    os.environ.setdefault("FEDSHARE_CACHE", str(tmp_path_factory.mktemp("cache")))
    return load_dataset(
        {
            "name": "digits",
            "test_fraction": 0.25,
            "features": "random_relu",
            "features_options": {"dim": 64},
        }
    )


def run(strategy, params, fed, seed=0, train=TRAIN, **kwargs):
    return simulate(
        make_strategy(strategy, params),
        fed,
        "linear",
        rounds=1,
        seed=seed,
        train=train,
        device="cpu",
        **kwargs,
    )


# --------------------------------------------------------------------------- FedPFT §6.3
def test_communication_formulas_reproduce_the_paper_values():
    assert gmm_bytes(2048, 10, 5, "diag") == 409_700
    assert gmm_bytes(2048, 10, 5, "diag") / MIB == pytest.approx(0.3907, abs=1e-4)  # "0.4 MB"
    assert gmm_bytes(2048, 20, 50, "diag") == 8_194_000  # "7.8 MB"
    assert gmm_bytes(2048, 20, 50, "diag") / MIB == pytest.approx(7.81, abs=0.01)
    assert gmm_bytes(768, 10, 7, "diag") == 215_180  # "0.2 MB"
    assert gmm_bytes(512, 10, 37, "diag") == 758_500  # "0.7 MB"
    assert raw_feature_bytes(25_000, 2048) == 102_400_000  # "97 MB"
    assert raw_feature_bytes(25_000, 2048) / MIB == pytest.approx(97.66, abs=0.01)
    assert 50 * head_bytes(2048, 100) == 20_490_000  # "19 MB"
    assert 50 * head_bytes(512, 101) == 5_181_300  # "4.9 MB"
    d, c = 2048, 100  # spherical K=1 costs about one head: (d + 2)C vs (d + 1)C
    assert gmm_params(d, 1, c, "spherical") - (c * d + c) == c
    assert gmm_params(10, 3, 4, "full") == (2 * 10 + (100 - 10) // 2 + 1) * 3 * 4


def pairs_sent(fed, k: int, policy: str = "drop") -> list[list[tuple[int, int]]]:
    """Per client, the (class, n) pairs the policy sends."""
    counts = fed.partition.class_counts
    out = []
    for row in counts:
        keep = [(c, int(n)) for c, n in enumerate(row) if n > 0 and (policy == "shrink" or n > k)]
        out.append(keep)
    return out


@pytest.mark.parametrize("cov", ["full", "diag", "spherical"])
def test_engine_bytes_equal_the_formula(mixture_data, cov):
    """The engine's measured upload = Σ_i 2·(FedPFT Eqs. 9–11, C_i classes) + 8 bytes per pair."""
    fed = federate(mixture_data, {"name": "dirichlet", "alpha": 0.3, "min_size": 5}, 4, 0)
    k, d = 3, 8
    result = run("fedpft", {"covariance": cov, "n_components": k}, fed)
    sent = pairs_sent(fed, k)
    expected = sum(gmm_bytes(d, k, len(p), cov) + 8 * len(p) for p in sent)
    summary = result.summary
    assert summary["bytes_shared"] == summary["bytes_up"] == expected
    # nothing goes down before the server trains; then every client downloads the head
    assert summary["bytes_down"] == fed.num_clients * (d + 1) * mixture_data.num_classes * 4
    assert summary["gmm_param_bytes"] == sum(gmm_bytes(d, k, len(p), cov) for p in sent)
    assert summary["gmm_pairs"] == sum(len(p) for p in sent)
    assert summary["gmm_meta_bytes"] == 8 * summary["gmm_pairs"]
    assert summary["synthetic_samples"] == sum(n for p in sent for _, n in p)


def test_shrink_policy_and_per_client_components(mixture_data):
    """fedshare's shrink: every pair is sent with K_eff = max(1, min(K, n − 1)); per-client K."""
    fed = federate(mixture_data, {"name": "dirichlet", "alpha": 0.05, "min_size": 1}, 5, 1)
    ks = [2, 12]
    result = run(
        "fedpft",
        {
            "covariance": "diag",
            "n_components": 5,
            "client_components": ks,
            "small_class_policy": "shrink",
        },
        fed,
    )
    expected = 0
    for i, pairs in enumerate(pairs_sent(fed, 0, "shrink")):
        k = ks[i % 2]
        comps = sum(max(1, min(k, n - 1)) for _, n in pairs)
        expected += 2 * comps * component_params(8, "diag") + 8 * len(pairs)
    assert result.summary["bytes_shared"] == expected
    assert result.summary["synthetic_samples"] == len(mixture_data.y_train)


def test_baseline_bytes(mixture_data):
    fed = federate(mixture_data, "iid", 3, 0)
    head = head_bytes(8, 10)
    for name in ("oneshot_avg", "ensemble"):
        s = run(name, {}, fed).summary
        assert (s["bytes_up"], s["bytes_shared"]) == (3 * head, 0)
    s = run("kd", {"temperatures": [2.0]}, fed).summary  # two sources send, the destination not
    # the sources' heads go straight to the destination: peer traffic, nothing to a server
    assert (s["bytes_peer"], s["bytes_up"], s["bytes_shared"]) == (2 * head, 0, 0)
    s = run("centralized", {}, fed).summary  # raw float16 features + uint8 labels
    assert s["bytes_shared"] == raw_feature_bytes(600, 8) + 600
    dp = run("dp_fedpft", {}, fed).summary  # spherical K=1: d + 2 numbers per pair
    assert dp["gmm_param_bytes"] == 3 * gmm_bytes(8, 1, 10, "spherical")


def test_fedpft_is_deterministic_and_seed_dependent(mixture_data):
    fed = federate(mixture_data, "iid", 3, 0)
    a = run("fedpft", {"n_components": 2}, fed)
    b = run("fedpft", {"n_components": 2}, fed)
    c = run("fedpft", {"n_components": 2}, fed, seed=1)
    wa, wb, wc = (r.strategy.head.weight for r in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)
    assert a.final_accuracy == b.final_accuracy


@pytest.mark.parametrize(
    ("labelled", "temperature", "epochs", "swa"),
    [
        (False, 2.0, 2, False),
        (True, None, None, False),
        (True, 2.0, None, False),
        (True, 1.0, 3, False),
        (True, 0.5, None, True),
    ],
)
def test_fit_head_is_sgd_on_ce_plus_t2_kl_written_out(labelled, temperature, epochs, swa):
    """fedshare's KD: full-batch plain SGD on CE(h(x), y) + T²·KL(softmax(t/T) ‖ softmax(h/T))
    (the KD term with a teacher; T defaults to 1; KD alone without labels) for `epochs` passes
    (default `train.local_epochs`), the returned loss the steps' mean; with SWA the head ends as
    the mean of the iterates after steps 2, 3, …"""
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(12, 3, generator=gen), torch.randint(0, 4, (12,), generator=gen)
    teacher = None if temperature is None else fresh_head(3, 4, gen, "cpu")
    train = TrainConfig(optimizer="sgd", lr=0.5, batch_size=12, local_epochs=4)
    head = fresh_head(3, 4, torch.Generator().manual_seed(1), "cpu")
    w, b = (p.detach().clone().requires_grad_() for p in (head.weight, head.bias))
    kwargs = {} if temperature in (None, 1.0) else {"temperature": temperature}
    average = IterateAverage(start=2, every=1) if swa else None
    loss = fit_head(
        head,
        x,
        y if labelled else None,
        train,
        0.5,
        torch.Generator().manual_seed(2),
        epochs,
        teacher,
        average=average,
        **kwargs,
    )
    losses, iterates = [], []
    for _ in range(4 if epochs is None else epochs):
        logits = x @ w.T + b
        step = F.cross_entropy(logits, y) if labelled else torch.zeros(())
        if teacher is not None:
            t = temperature or 1.0
            p_t = torch.softmax(teacher(x).detach() / t, dim=1)
            log_s = torch.log_softmax(logits / t, dim=1)
            step = step + t * t * (p_t * (p_t.log() - log_s)).sum(1).mean()
        gw, gb = torch.autograd.grad(step, (w, b))
        with torch.no_grad():
            w -= 0.5 * gw
            b -= 0.5 * gb
        losses.append(float(step.detach()))
        iterates.append((w.detach().clone(), b.detach().clone()))
    if swa:
        w, b = (torch.stack(v[1:]).mean(0) for v in zip(*iterates, strict=True))
    torch.testing.assert_close(head.weight.detach(), w.detach(), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(head.bias.detach(), b.detach(), atol=1e-6, rtol=1e-5)
    assert float(loss) == pytest.approx(sum(losses) / len(losses), rel=1e-5)
    with pytest.raises(ValueError, match="labels, a teacher"):
        fit_head(head, x, None, train, 0.5, gen)


def test_synthesis_draws_round_n_times_multiplier_at_least_one_from_each_pairs_stream():
    """fedshare's choice: max(1, round(n·multiplier)) samples per (label, n, mixture),
    labelled with its class; each (client, class) from its own stream."""
    from fedshare.engine.rng import torch_generator
    from fedshare.functional.gmm import GaussianMixture

    def gaussian(mean: float) -> GaussianMixture:
        ones = torch.ones(1, 2, dtype=torch.float64)
        return GaussianMixture(ones[0, :1], mean * ones, ones, "diag")

    mixtures = [(3, 10, gaussian(0.0)), (7, 1, gaussian(5.0))]
    strategy = make_strategy("fedpft", {"synthetic_multiplier": 0.3})
    xs, ys = strategy.synthesize(mixtures, 11, 2, "p", torch.device("cpu"))
    assert [len(x) for x in xs] == [3, 1]  # round(3.0), max(1, round(0.3))
    assert [y.tolist() for y in ys] == [[3, 3, 3], [7]]
    for (label, _, g), x, m in zip(mixtures, xs, (3, 1), strict=True):
        torch.testing.assert_close(x, g.sample(m, torch_generator(11, "p", 2, label)).float())
    big = make_strategy("fedpft", {"synthetic_multiplier": 2.5})
    assert [len(x) for x in big.synthesize(mixtures, 11, 2, "p", torch.device("cpu"))[0]] == [
        25,
        2,  # round(2.5) = 2
    ]


def test_local_mixtures_fit_each_class_and_report_drops_and_mean_em_iterations():
    """Under `drop`, classes with n ≤ K are left out and counted; `em_iterations` is the mean
    EM iterations over the fitted classes (0 when none is fitted; 0 for a `shrink` point
    mass)."""
    from types import SimpleNamespace

    from fedshare.functional.gmm import fit_gmm

    gen = torch.Generator().manual_seed(0)
    feats = torch.randn(23, 2, generator=gen)
    labels = torch.tensor([0] * 12 + [1] * 2 + [2] * 9)
    client = SimpleNamespace(rng=lambda name: torch.Generator().manual_seed(len(name)))
    strategy = make_strategy("fedpft", {"n_components": 2})
    mixtures, stats = strategy.local_mixtures(feats, labels, 2, client, "gmm")
    assert [(c, n) for c, n, _ in mixtures] == [(0, 12), (2, 9)]
    iters = [
        fit_gmm(feats[labels == c], 2, generator=torch.Generator().manual_seed(len(f"gmm/{c}")))[
            1
        ].n_iter
        for c in (0, 2)
    ]
    assert stats == {"gmm_dropped_samples": 2.0, "em_iterations": sum(iters) / 2}
    _, one = strategy.local_mixtures(feats[:12], labels[:12], 2, client, "gmm")
    assert one["em_iterations"] == iters[0] >= 2
    _, none = strategy.local_mixtures(feats[12:14], labels[12:14], 2, client, "gmm")
    assert none == {"gmm_dropped_samples": 2.0, "em_iterations": 0.0}
    shrink = make_strategy("fedpft", {"n_components": 2, "small_class_policy": "shrink"})
    pairs, stats = shrink.local_mixtures(feats[:13], labels[:13], 2, client, "gmm")
    assert [(c, n) for c, n, _ in pairs] == [(0, 12), (1, 1)]  # n = 1: a point mass, no EM
    assert stats == {"gmm_dropped_samples": 0.0, "em_iterations": iters[0] / 2}


def test_dp_releases_one_gaussian_per_class_of_at_least_two_samples_without_em():
    """FedPFT §4.3: DP-FedPFT releases one Gaussian per (client, class) and drops pairs with n < 2;
    it runs no EM (0 iterations reported)."""
    from types import SimpleNamespace

    feats = torch.nn.functional.normalize(
        torch.randn(9, 3, generator=torch.Generator().manual_seed(0))
    )
    labels = torch.tensor([0, 1, 1, 2, 2, 2, 2, 2, 2])
    client = SimpleNamespace(rng=lambda name: torch.Generator().manual_seed(0))
    for policy in ("drop", "shrink"):  # shrink keeps n = 1 without DP, not with it
        strategy = make_strategy("dp_fedpft", {"dp_check": False, "small_class_policy": policy})
        mixtures, stats = strategy.local_mixtures(feats, labels, 1, client, "gmm")
        assert [(c, n, g.n_components) for c, n, g in mixtures] == [(1, 2, 1), (2, 6, 1)]
        assert stats == {"gmm_dropped_samples": 1.0, "em_iterations": 0.0}


def test_dp_fedpft_normalises_train_and_test_features(mixture_data):
    fed = federate(mixture_data, "iid", 2, 0)
    result = run("dp_fedpft", {"dp_epsilon": 1.0}, fed)
    model = result.strategy.global_model()
    x = mixture_data.x_test[:5]
    expected = result.strategy.head(torch.nn.functional.normalize(x, dim=1))
    torch.testing.assert_close(model(x), expected)


def test_dp_reductions_and_the_unchecked_paper_calibration_run(mixture_data):
    """raw (default) and projected both train; the paper's unchecked σ runs at ε = 20."""
    fed = federate(mixture_data, "iid", 2, 0)
    accs = {
        red: run("dp_fedpft", {"dp_reduction": red}, fed).final_accuracy
        for red in ("raw", "projected")
    }
    assert all(0 <= a <= 100 for a in accs.values())
    run("dp_fedpft", {"dp_epsilon": 20.0, "dp_check": False}, fed)
    run("dp_fedpft", {"dp_epsilon": 20.0, "dp_calibration": "analytic"}, fed)


def test_oneshot_average_weightings():
    """uniform gives every client's head weight 1/I whatever its n_i; samples weights by n_i."""
    from fedshare.strategies.base import Update

    heads = [torch.arange(6.0), torch.full((6,), 10.0)]
    means = {}
    for weighting in ("samples", "uniform"):
        strategy = make_strategy("oneshot_avg", {"weighting": weighting})
        strategy.head = torch.nn.Linear(2, 2)
        updates = [Update(0, 10, weights=heads[0]), Update(1, 990, weights=heads[1])]
        strategy.aggregate(updates, 0)
        means[weighting] = torch.cat([strategy.head.weight.flatten(), strategy.head.bias])
    torch.testing.assert_close(means["uniform"], (heads[0] + heads[1]) / 2)
    torch.testing.assert_close(means["samples"], 0.01 * heads[0] + 0.99 * heads[1])


@pytest.mark.parametrize(
    ("strategy", "params", "match"),
    [
        ("fedpft", {"covariance": "tied"}, "strategy.covariance"),
        ("fedpft", {"small_class_policy": "keep"}, "small_class_policy"),
        ("fedpft", {"dp": True, "n_components": 3}, "n_components=1"),
        ("dp_fedpft", {"dp_epsilon": -1.0}, "epsilon"),
        ("dp_fedpft", {"dp_reduction": "trace"}, "dp_reduction"),
        ("dp_fedpft", {"dp_epsilon": 20.0}, "dp_calibration=analytic"),
        ("fedpft", {"wire_dtype": "int8"}, "wire_dtype"),
        ("oneshot_avg", {"weighting": "median"}, "strategy.weighting"),
        ("ensemble", {"rule": "vote"}, "strategy.rule"),
        ("kd", {"temperatures": [0.0]}, "temperatures"),
    ],
)
def test_bad_parameters_are_clear_errors(mixture_data, strategy, params, match):
    fed = federate(mixture_data, "iid", 2, 0)
    with pytest.raises(FedshareError, match=match):
        run(strategy, params, fed)


def test_one_shot_strategies_need_one_round(mixture_data):
    fed = federate(mixture_data, "iid", 2, 0)
    for name in ("fedpft", "fedpft_chain", "ensemble", "oneshot_avg", "kd"):
        with pytest.raises(FedshareError, match="rounds=1"):
            simulate(name, fed, "linear", rounds=3, device="cpu")


def test_centralized_runs_any_model_and_resumes_exactly(tmp_path):
    """Centralized on images with a CNN over 3 rounds: the data is sent once, and a run killed
    after round 1 and resumed equals the uninterrupted one (the pool is in the checkpoint)."""
    fed = federate(load_dataset({"name": "digits"}), "iid", 3, 0)
    options = dict(
        rounds=3, device="cpu", train={"lr": 0.05, "momentum": 0.9}, checkpoint={"every": 1}
    )
    full = simulate("centralized", fed, "cnn_small", run_dir=tmp_path / "full", **options)
    assert full.final_accuracy > 80
    assert len({r["bytes_shared"] for r in full.history}) == 1  # sent once, in round 0

    def kill(_sim, completed, _record):
        if completed == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        simulate(
            "centralized", fed, "cnn_small", run_dir=tmp_path / "cut", callbacks=[kill], **options
        )
    resumed = simulate(
        "centralized", fed, "cnn_small", run_dir=tmp_path / "cut", resume=True, **options
    )
    assert without_wall_time(resumed.history) == without_wall_time(full.history)


def test_chain_hops_and_destination_head(digits64):
    """FedPFT §4.2: two clients with disjoint labels; client 0 sends once, client 1 sends nothing,
    the destination's head is the global model and knows the source's classes."""
    fed = federate(digits64, {"name": "task", "tasks": 2}, 2, 0)
    result = run(
        "fedpft_chain", {"covariance": "diag", "n_components": 2, "report_local": True}, fed
    )
    record = result.history[-1]
    sent = pairs_sent(fed, 2)[0]
    assert result.summary["bytes_shared"] == gmm_bytes(64, 2, len(sent), "diag") + 8 * len(sent)
    # one hop, client to client: no server sees it
    assert result.summary["bytes_peer"] == result.summary["bytes_shared"]
    assert result.summary["bytes_up"] == result.summary["bytes_down"] == 0
    assert record["hop_params"][1] == 0
    assert record["chain_accuracy"][-1] == pytest.approx(result.final_accuracy, abs=1e-3)
    assert max(record["local_accuracy"]) < 55  # half the classes alone
    assert result.final_accuracy > 80


def test_chain_needs_every_client(digits64):
    fed = federate(digits64, "iid", 4, 0)
    with pytest.raises(FedshareError, match=r"clients\.fraction=1"):
        run("fedpft_chain", {}, fed, clients={"fraction": 0.5})


def test_fast_sanity_of_the_claims(digits64):
    """One seed of the CPU stand-in's C1/C4 setting (docs/fedpft.md; digits-64, I=5, Dir(0.3)):
    FedPFT is near Centralized and far above one-shot averaging (loose margins; the 3-seed claims
    are in the slow tier)."""
    fed = federate(digits64, {"name": "dirichlet", "alpha": 0.3}, 5, 0)
    train = {**TRAIN, "local_epochs": 60}
    central = run("centralized", {}, fed, train=train).final_accuracy
    pft = run(
        "fedpft",
        {"covariance": "diag", "n_components": 10, "small_class_policy": "shrink"},
        fed,
        train=train,
    ).final_accuracy
    avg = run("oneshot_avg", {}, fed, train=train).final_accuracy
    assert pft >= central - 5
    assert pft >= avg + 10


def test_cli_run_records_the_communication(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "fedshare.run",
            "strategy=fedpft",
            "data=digits",
            "data.features=random_relu",
            "+data.features_options.dim=32",
            "model=linear",
            "rounds=1",
            "clients.num=3",
            "strategy.n_components=2",
            "train.optimizer=adam",
            "train.lr=0.01",
            "progress=false",
            f"run_dir={out}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "FEDSHARE_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["data"] == "digits+random_relu"
    assert summary["bytes_shared"] == summary["gmm_param_bytes"] + summary["gmm_meta_bytes"]
    counts = np.array(json.loads((out / "partition.json").read_text())["class_counts"])
    pairs = int((counts > 2).sum())
    assert summary["gmm_param_bytes"] == gmm_bytes(32, 2, pairs, "diag")


PRESETS = sorted(
    p.stem
    for p in (Path(__file__).resolve().parents[1] / "configs/experiment/fedpft").glob("*.yaml")
)


@pytest.mark.parametrize("preset", PRESETS)
def test_presets_and_table_rows_compose(preset):
    """Every preset composes, and with every implemented row of its paper table the strategy,
    dataset and partition options are accepted (no data needed)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from fedshare.config.params import check_params
    from fedshare.data.datasets import COMMON_KEYS, DATASETS
    from fedshare.data.partitioners import PARTITIONERS
    from fedshare.paper.compare import load_table
    from fedshare.run import config_dir

    table = {"table2": "fedpft_table2", "table5": "fedpft_table5"}.get(preset.split("_")[0])
    rows = [[]]
    if table:
        rows = [
            spec["overrides"] for spec in load_table(table)["methods"].values() if spec["overrides"]
        ]
        assert any(e["preset"] == f"fedpft/{preset}" for e in load_table(table)["entries"])
    with initialize_config_dir(str(config_dir()), version_base="1.3"):
        for overrides in rows:
            cfg = compose("config", [f"experiment=fedpft/{preset}", *overrides])
            plain = OmegaConf.to_container(cfg, resolve=False)
            strategy = dict(plain["strategy"])
            make_strategy(strategy.pop("name"), strategy)
            data = {k: v for k, v in plain["data"].items() if k not in COMMON_KEYS}
            check_params(DATASETS.get(plain["data"]["name"]), data, "dataset", "d", skip=1)
            part = {k: v for k, v in plain["partition"].items() if k not in ("name", "seed")}
            check_params(
                PARTITIONERS.get(plain["partition"]["name"]), part, "partition", "p", skip=3
            )
            rounds = 20 if preset == "heads_multiround" else 1  # the multi-round heads
            assert plain["rounds"] == rounds and plain["model"]["name"] == "linear"


@pytest.mark.parametrize("name", ["ensemble", "oneshot_avg"])
def test_heads_sent_to_the_last_client_count_one_transfer_and_match_the_server_form(digits64, name):
    """Table 2's source → destination: the source's head goes straight to the destination
    (bytes_peer, nothing up or down); the destination combines exactly what a server would."""
    fed = federate(digits64, {"name": "task", "tasks": 2}, 2, 0)
    star = run(name, {}, fed)
    pair = run(name, {"to_last_client": True}, fed)
    assert pair.final_accuracy == star.final_accuracy
    head = head_bytes(64, 10)
    assert pair.summary["bytes_peer"] == head + 8  # one head and its sample count
    assert (pair.summary["bytes_up"], pair.summary["bytes_down"]) == (0, 0)
    assert star.summary["bytes_up"] == 2 * head and star.summary["bytes_peer"] == 0
    with pytest.raises(FedshareError, match=r"clients\.fraction=1"):
        run(name, {"to_last_client": True}, fed, clients={"fraction": 0.5})
