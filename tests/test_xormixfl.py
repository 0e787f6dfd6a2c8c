"""XorMixFL / MixFL / standalone (Eqs. 1–3, Algorithms 1–2): exact XOR properties,
blending, quotas, the protocol's shape, the MDS metric; a reduced digits run of the orderings."""

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import fedshare
from fedshare.errors import FedshareError
from fedshare.functional.mixup import ORDERS, fold_weights, soft_labels
from fedshare.functional.xor_mixup import (
    binarize,
    blend,
    blend_by_label,
    from_bytes,
    quantize,
    to_bytes,
    xor_code,
    xor_reduce,
)
from fedshare.privacy.mds import classical_mds, distance_stats, min_contributor_distance
from fedshare.strategies import make_strategy
from helpers import digits_federation, results_only

SMALL = {"name": "xormix", "target_labels": [9], "n": 2, "m": 25}
TRAIN = {"local_epochs": 50, "batch_size": 32, "optimizer": "adam", "lr": 1e-2}


def images(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randint(0, 256, shape, generator=gen, dtype=torch.uint8)


def run(strategy: str, seed: int = 0, partition=SMALL, train=TRAIN, **params):
    fed = digits_federation(partition, 4, seed)
    return fedshare.simulate(
        make_strategy(strategy, params),
        fed,
        "mlp",
        rounds=1,
        seed=seed,
        train=train,
        eval={"per_class": True},
    )


# -------------------------------------------------------- XOR and blending (XorMixFL §3, Eqs. 1–3)
@settings(max_examples=30, deadline=None)
@given(st.integers(1, 4), st.integers(1, 3), st.integers(0, 2**31 - 1))
def test_decoding_with_the_devices_own_keys_is_exact(m, p, seed):
    gen = torch.Generator().manual_seed(seed)
    target = blend(images(gen, 5, p, 1, 8, 8), 0.5)
    keys = torch.stack([blend(images(gen, 5, p, 1, 8, 8), 0.95) for _ in range(m)], dim=1)
    code = xor_code(target, keys)
    assert code.dtype == torch.uint8
    assert torch.equal(xor_code(code, keys), target)
    shuffled = keys[:, torch.randperm(m, generator=gen)]  # any XOR order
    assert torch.equal(xor_code(code, shuffled), target)
    assert torch.equal(xor_code(xor_code(target, keys[:, :1]), keys[:, :1]), target)


def test_background_passes_through_the_code_and_the_decoding():
    gen = torch.Generator().manual_seed(0)
    target = images(gen, 20, 1, 28, 28)
    device_key = images(gen, 20, 1, 1, 28, 28) * (torch.rand(20, 1, 1, 28, 28) < 0.2)
    server_key = images(gen, 20, 1, 1, 28, 28) * (torch.rand(20, 1, 1, 28, 28) < 0.2)
    code = xor_code(target, device_key)
    decoded = xor_code(code, server_key)
    zero = device_key[:, 0] == 0
    assert torch.equal(code[zero], target[zero])  # a zero key leaks the target (fedshare's caveat)
    equal = device_key[:, 0] == server_key[:, 0]
    assert torch.equal(decoded[equal], target[equal])
    assert not torch.equal(decoded, target)


def test_bytes_quantize_binarize_and_xor_written_out():
    """fedshare's byte reading: round half up and clip to 0…255; bytes ↔ stored values on the
    dataset's scale; the {0, 255} option thresholds at 128; XOR keys one after another
    (Eqs. 2–3)."""
    got = quantize(torch.tensor([-3.0, 0.49, 0.5, 127.5, 254.6, 300.0], dtype=torch.float64))
    assert got.tolist() == [0, 0, 1, 128, 255, 255]
    assert binarize(torch.tensor([0, 127, 128, 255], dtype=torch.uint8)).tolist() == [
        0,
        0,
        255,
        255,
    ]
    digits = torch.tensor([0.0, 3.0, 7.5, 16.0])  # digits: stored 0…16, scale 1/16
    b = to_bytes(digits, 1 / 16)
    assert b.tolist() == [0, 48, 120, 255]  # round(x · 255 / 16)
    back = from_bytes(b, 1 / 16, torch.float32)
    assert back.dtype == torch.float32
    torch.testing.assert_close(back, b.double().mul(16 / 255).float())
    raw = torch.tensor([3, 200], dtype=torch.uint8)
    assert to_bytes(raw, 1 / 255) is raw and from_bytes(raw, 1 / 255, torch.uint8) is raw
    gen = torch.Generator().manual_seed(4)
    x, keys = images(gen, 2, 3, 3), images(gen, 2, 3, 3, 3)
    by_hand = keys[:, 0] ^ keys[:, 1] ^ keys[:, 2]
    assert torch.equal(xor_reduce(keys), by_hand)
    assert torch.equal(xor_reduce(keys.transpose(0, 1), dim=0), by_hand)
    assert torch.equal(xor_code(x, keys), x ^ by_hand)


def test_soft_labels_add_each_positions_weight_to_its_class():
    labels = torch.tensor([[2, 0], [1, 1]])
    got = soft_labels(labels, torch.tensor([0.75, 0.25], dtype=torch.float64), 3)
    assert got.tolist() == [[0.25, 0.0, 0.75], [0.0, 1.0, 0.0]]


def test_a_label_with_fewer_than_p_samples_blends_what_it_has_and_repeats_its_first():
    """ "Up to p" (Eq. 1): a label with 2 samples and p = 3 blends both (k = 2) and records the
    first position again."""
    gen = torch.Generator().manual_seed(5)
    x = images(gen, 6, 1, 2, 2)
    y = torch.tensor([0, 1, 0, 0, 1, 0])
    out, pos = blend_by_label(x, y, torch.tensor([1, 1, 0]), 3, 0.25, gen)
    assert sorted(pos[0, :2].tolist()) == [1, 4] and pos[0, 2] == pos[0, 0]
    assert torch.equal(out[0], blend(x[pos[0, :2]][None], 0.25)[0])
    assert set(pos[2].tolist()) <= {0, 2, 3, 5} and len(set(pos[2].tolist())) == 3
    y[3] = 2  # label 2's only sample: its blend is the sample itself
    out, pos = blend_by_label(x, y, torch.tensor([2]), 3, 0.25, gen)
    assert pos.tolist() == [[3, 3, 3]] and torch.equal(out[0], x[3])
    with pytest.raises(ValueError, match="no sample of label 7"):
        blend_by_label(x, y, torch.tensor([0, 7]), 3, 0.25, gen)


def test_blend_arithmetic():
    gen = torch.Generator().manual_seed(1)
    x = images(gen, 6, 3, 1, 8, 8)
    assert torch.equal(blend(x[:, :1], 0.3), x[:, 0])  # g^1(x) = x
    half_up = torch.floor((x[:, 0].double() + x[:, 1].double()) / 2 + 0.5).to(torch.uint8)
    assert torch.equal(blend(x[:, :2], 0.5), half_up)
    for alpha in (0.25, 0.5, 0.95):
        for k in (1, 2, 5):
            for order in ORDERS:
                w = fold_weights(alpha, k, order)
                assert float(w.sum()) == pytest.approx(1.0) and (w > 0).all()
            assert float(fold_weights(alpha, k)[0]) == pytest.approx(alpha ** (k - 1))
    assert fold_weights(0.5, 5, "sequence").tolist() == [1 / 16, 4 / 16, 6 / 16, 4 / 16, 1 / 16]
    # the left fold computed step by step, quantised once at the end
    s = x[:, 0].double()
    for j in (1, 2):
        s = 0.95 * s + 0.05 * x[:, j].double()
    assert (blend(x, 0.95).int() - quantize(s).int()).abs().max() <= 1
    assert blend(x, 0.5, binary=True).unique().tolist() in ([0, 255], [0], [255])


def test_blend_by_label_draws_distinct_samples_of_the_right_label():
    gen = torch.Generator().manual_seed(2)
    x = images(gen, 40, 1, 4, 4)
    y = torch.arange(40) % 4
    labels = torch.tensor([[0, 1], [2, 3], [1, 0]])
    out, pos = blend_by_label(x, y, labels, 3, 0.5, gen)
    assert out.shape == (3, 2, 1, 4, 4) and pos.shape == (3, 2, 3)
    assert torch.equal(y[pos], labels[..., None].expand(-1, -1, 3))
    assert all(len(set(row.tolist())) == 3 for row in pos.flatten(0, 1))
    assert torch.equal(out[0, 1], blend(x[pos[0, 1]][None], 0.5)[0])


# ------------------------------------------------------ the strategy (XorMixFL §3, Algorithms 1–2)
def shared(strategy: str, seed: int = 0, **params):
    """Run the sharing only (no training) and return the strategy and the summary."""
    result = run(strategy, seed, train={**TRAIN, "local_epochs": 1}, server_epochs=0, **params)
    return result.strategy, result.summary


def test_quotas_balance_the_server_and_split_evenly():
    fed = digits_federation({**SMALL, "n": 2, "m": 30}, 4, 0)
    strategy = make_strategy("xormixfl")
    result = fedshare.simulate(strategy, fed, "mlp", rounds=1, train={"local_epochs": 1})
    table = strategy.quota_table
    assert table[0].tolist() == [0]  # the server pseudo-client uploads nothing
    assert sorted(table[1:, 0].tolist()) == [9, 9, 10]  # 28 = 10 + 9 + 9 (fedshare's even split)
    assert result.summary["shared_samples"] == 28
    counts = torch.as_tensor(fed.partition.class_counts[0])
    assert result.history[-1]["server_train_samples"] == int(counts.sum()) + 28  # 10 × 30


def test_protocol_shape_one_upload_per_device_no_model_traffic():
    strategy, summary = shared("xormixfl", M=2)
    per_sample = 64 + 3  # an 8×8 uint8 code plus 3 uint8 label ids (target + M dummies)
    assert summary["bytes_up"] == 23 * per_sample  # quota 25 − 2 per device total; no weights
    assert summary["shared_samples"] == 23
    model_bytes = sum(p.numel() * 4 for p in strategy.global_model().parameters())
    # target, quota table, dummy ids; then every participant downloads the trained model once
    assert summary["bytes_down"] == 4 * (2 + 4 * 4 + 2 * 9) + 4 * model_bytes


@pytest.mark.parametrize("num_classes", [256, 257])
def test_a_device_encodes_its_quota_with_dummies_it_holds(num_classes):
    """Algorithm 1 on one device: per target label with a quota, that many codes t ⊕ d of
    blends of its own samples (a dummy label it does not hold is never drawn); labels
    [target, dummy] as uint8 while every class id fits (≤ 256 classes), else int64."""
    from types import SimpleNamespace

    from fedshare.strategies.base import Message

    gen = torch.Generator().manual_seed(6)
    x, y = images(gen, 8, 1, 2, 2), torch.tensor([0, 1, 3, 1, 0, 1, 3, 0])
    client = SimpleNamespace(
        id=1,
        raw=lambda: (x, y),
        scale=1 / 255,
        rng=lambda name: torch.Generator().manual_seed(7),
        num_classes=num_classes,
    )
    message = Message(
        payload={
            "target_labels": torch.tensor([1, 2, 3], dtype=torch.int16),
            "quota": torch.tensor([[5, 5, 5], [3, 4, 0]], dtype=torch.int32),
            "dummy_labels": torch.tensor([0, 4], dtype=torch.int16),
        }
    )
    update = make_strategy("xormixfl").client_update(client, message)
    labels, positions = update.payload["labels"], update.audit["positions"]
    assert labels.dtype == (torch.uint8 if num_classes == 256 else torch.int64)
    assert labels.tolist() == [[1, 0]] * 3  # label 2 is not held, label 3's quota is 0
    assert update.num_samples == 3 and torch.equal(y[positions], labels.long())
    assert torch.equal(update.payload["samples"], x[positions[:, 0]] ^ x[positions[:, 1]])
    assert torch.equal(update.audit["target_blends"], x[positions[:, 0]])
    message.payload["quota"][1] = 0  # asked for nothing: no upload, no sample counted
    nothing = make_strategy("xormixfl").client_update(client, message)
    assert (nothing.num_samples, nothing.payload) == (0, {})


def test_preblend_encodes_with_one_blend_of_the_m_dummies():
    """`preblend` (fedshare's reading of M > 1): the M dummy blends are first blended into one
    key (Eq. 1), then XORed."""
    gen = torch.Generator().manual_seed(8)
    target, dummies = images(gen, 4, 1, 3, 3), images(gen, 4, 2, 1, 3, 3)
    labels = torch.zeros(4, 3, dtype=torch.long)
    for m, expected in ((2, target ^ blend(dummies, 0.25)), (1, target ^ dummies[:, 0])):
        strategy = make_strategy(
            "xormixfl", {"multi_dummy_mode": "preblend", "M": m, "alpha": 0.25}
        )
        assert torch.equal(strategy.encode(target, dummies[:, :m], labels), expected)
        assert torch.equal(strategy.encode(target[:1], dummies[:1, :m], labels[:1]), expected[:1])
    with pytest.raises(ValueError, match="at least 1"):
        fold_weights(0.5, 0)


def test_a_device_asked_for_one_sample_uploads_it():
    """quota 4 over three devices: 2, 1, 1 (an even split); each uploads exactly its share."""
    strategy, summary = shared("xormixfl", quota=4)
    assert sorted(strategy.quota_table[1:, 0].tolist()) == [1, 1, 2]
    assert summary["shared_samples"] == 4


def spy_server(name: str, **params):
    """Run the sharing; return (fed, strategy, what `augment` returned, the server's training
    inputs and labels)."""
    fed = digits_federation(SMALL, 4, 0)
    strategy = make_strategy(name, {"server_epochs": 0, **params})
    seen: dict[str, object] = {}
    augment, train = strategy.augment, strategy.train_server

    def spy_augment(uploads, labels, round_idx):
        seen["augment"] = (uploads, labels, *augment(uploads, labels, round_idx))
        return seen["augment"][2:]

    def spy_train(x, y, round_idx):
        seen["train"] = (x, y)
        return train(x, y, round_idx)

    strategy.augment, strategy.train_server = spy_augment, spy_train
    fedshare.simulate(strategy, fed, "mlp", rounds=1, train={"local_epochs": 1})
    return fed, strategy, seen["augment"], seen["train"]


def test_server_decodes_with_its_own_dummy_samples_and_trains_on_base_plus_decoded():
    """Eq. 3 with p = M = 1: decoded = code ⊕ a server sample of the code's dummy label; the
    server trains on its base samples and the decoded ones (back on the stored scale) with the
    target label (hard)."""
    fed, strategy, (uploads, labels, decoded, y_shared, keys), (x, y) = spy_server(
        "xormixfl", include_server_keys=True
    )
    x_base, y_base = strategy.server_data()
    nb = len(x_base)
    assert torch.equal(decoded, uploads ^ keys[:, 0])
    server = fed.client_indices[strategy.server]
    key_samples = torch.nonzero(
        (digit_bytes(fed)[server][:, None] == keys[None, :, 0]).flatten(2).all(2)
    )
    assert torch.equal(torch.unique(key_samples[:, 1]), torch.arange(len(keys)))
    key_labels = fed.dataset.y_train[server][key_samples[:, 0]]
    assert torch.equal(key_labels, labels[key_samples[:, 1], 1])
    assert torch.equal(x[:nb], x_base) and torch.equal(y[:nb], y_base)
    torch.testing.assert_close(x[nb:], decoded.double().mul(16 / 255).float())
    assert (y[nb:] == 9).all() and torch.equal(y_shared, labels[:, 0])


def test_mixfl_server_trains_on_the_uploads_with_one_hot_base_rows_and_mixup_labels():
    _, strategy, (uploads, labels, augmented, y_shared, keys), (x, y) = spy_server(
        "mixfl", alpha=0.25, dummy_labels=[3]
    )
    x_base, y_base = strategy.server_data()
    nb = len(x_base)
    assert keys is None and torch.equal(augmented, uploads)
    torch.testing.assert_close(x[nb:], uploads.double().mul(16 / 255).float())
    assert torch.equal(y[:nb], torch.nn.functional.one_hot(y_base, 10).float())
    expected = torch.zeros(len(uploads), 10)
    expected[:, 9], expected[:, 3] = 0.25, 0.75
    assert torch.equal(labels[:, 1], torch.full((len(uploads),), 3))
    torch.testing.assert_close(y[nb:], expected)
    assert torch.equal(y_shared, y[nb:])


def test_alpha_has_no_effect_at_p1_and_runs_are_deterministic():
    def summary(**params):
        return results_only(shared("xormixfl", **params)[1])

    summaries = [summary(alpha=a) for a in (0.25, 0.5, 0.95)]
    assert summaries[0] == summaries[1] == summaries[2]
    assert summary(p=3, alpha=0.25)["mds_mean"] != summary(p=3, alpha=0.95)["mds_mean"]


def capture(name: str, **params):
    """Run the sharing only and return (fed, [(update, contributors, target blend)], summary)."""
    fed = digits_federation(SMALL, 4, 0)
    captured = []
    strategy = make_strategy(name, {"server_epochs": 0, **params})
    original = strategy.aggregate

    def spy(updates, round_idx):
        def watch():
            for update in updates:
                if update.payload:
                    audit = update.audit
                    contributors = fed.client_indices[update.client_id][audit["positions"]]
                    captured.append((update, contributors, audit["target_blends"]))
                yield update

        return original(watch(), round_idx)

    strategy.aggregate = spy
    result = fedshare.simulate(strategy, fed, "mlp", rounds=1, train={"local_epochs": 1})
    return fed, captured, result.summary


def digit_bytes(fed) -> torch.Tensor:
    return (fed.dataset.x_train * 255 / 16).add(0.5).floor().clamp(0, 255).to(torch.uint8)


def test_uploads_are_codes_of_the_recorded_contributors():
    """Re-encode every upload from its contributors: Eq. 1 + Eq. 2 bit for bit."""
    fed, captured, _ = capture("xormixfl", M=2, p=2)
    assert len(captured) == 3  # one upload per device
    x = digit_bytes(fed)
    for update, contributors, target_blend in captured:
        raw = x[contributors]  # (q, p + M·p, ...)
        keys = torch.stack([blend(raw[:, 2:4], 0.5), blend(raw[:, 4:6], 0.5)], dim=1)
        assert torch.equal(target_blend, blend(raw[:, :2], 0.5))
        assert torch.equal(update.payload["samples"], xor_code(target_blend, keys))
        y = fed.dataset.y_train[contributors]
        assert (y[:, :2] == 9).all() and (y[:, 2:] != 9).all()
        assert torch.equal(update.payload["labels"][:, 1:].long(), y[:, 2::2])


def test_mixfl_uploads_midpoints_with_soft_labels_at_alpha_half():
    fed, captured, summary = capture("mixfl", dummy_labels=[3])
    x = digit_bytes(fed).double()
    distances = []
    for update, contributors, _ in captured:
        t, d = x[contributors[:, 0]], x[contributors[:, 1]]
        assert torch.equal(update.payload["samples"], quantize((t + d) / 2))
        distances.append((t - d).flatten(1).norm(dim=1) / 2)
    half = torch.cat(distances).mean()
    assert abs(summary["mds_mean"] - float(half)) <= 0.5 * 8  # rounding ≤ ½ per pixel, 64 px
    soft = soft_labels(torch.tensor([[9, 3]]), fold_weights(0.5, 2), 10)
    assert soft[0, 9] == soft[0, 3] == 0.5 and float(soft.sum()) == 1.0


@pytest.mark.parametrize("m", [1, 2, 3])
def test_mixfl_mix_order_and_ratio(m):
    """mix_order=equal keeps the target at 1/(M+1) (a left fold shrinks it to ratio^M);
    mix_ratio replaces α as the target-vs-dummy ratio; both default to the old behaviour."""
    weights = {
        key: make_strategy("mixfl", {"M": m, "alpha": 0.25, **params})._weights()
        for key, params in {
            "old": {},
            "ratio": {"mix_ratio": 0.5},
            "equal": {"mix_order": "equal"},
        }.items()
    }
    torch.testing.assert_close(
        weights["equal"], torch.full((m + 1,), 1 / (m + 1), dtype=torch.float64)
    )
    assert float(weights["old"][0]) == pytest.approx(0.25**m)
    assert float(weights["ratio"][0]) == pytest.approx(0.5**m)


def test_mixfl_hard_labels_train_on_the_target_label():
    uploads = torch.zeros(2, 1, 2, 2, dtype=torch.uint8)
    labels = torch.tensor([[9, 3, 4], [7, 4, 3]])
    strategy = make_strategy("mixfl", {"label": "hard", "M": 2})
    samples, y, keys = strategy.augment(uploads, labels, 0)
    assert samples is uploads and keys is None and y.tolist() == [9, 7]


def test_mixfl_equal_order_uploads_the_plain_mean():
    fed, captured, _ = capture("mixfl", M=2, dummy_labels=[3, 4], mix_order="equal")
    x = digit_bytes(fed).double()
    for update, contributors, _ in captured:
        mean = x[contributors].mean(1)  # p = 1: [target, dummy 3, dummy 4]
        assert torch.equal(update.payload["samples"], quantize(mean))
        assert torch.equal(
            update.payload["labels"][:, 1:].long(), torch.tensor([[3, 4]]).expand(len(mean), -1)
        )


def test_mds_metric():
    gen = torch.Generator().manual_seed(3)
    pts = torch.randn(30, 12, generator=gen, dtype=torch.float64)
    emb = classical_mds(pts, 12)
    assert torch.allclose(torch.cdist(emb, emb), torch.cdist(pts, pts), atol=1e-6)
    samples = torch.randn(7, 5, generator=gen)
    contributors = torch.randn(7, 4, 5, generator=gen)
    brute = torch.stack(
        [min((samples[i] - contributors[i, j]).norm() for j in range(4)) for i in range(7)]
    )
    got = min_contributor_distance(samples, contributors)
    assert torch.allclose(got.float(), brute, atol=1e-5)
    full = min_contributor_distance(samples, contributors, dims=5)
    assert torch.allclose(full, got, atol=1e-6)  # full-rank classical MDS = Euclidean
    # MixFL at α = 0.5: the midpoint is ½‖T − D‖ from both parents
    t, d = torch.zeros(1, 4), torch.full((1, 4), 200.0)
    mid = (t + d) / 2
    assert float(min_contributor_distance(mid, torch.stack([t, d], 1))) == pytest.approx(200.0)
    stats = distance_stats(torch.tensor([1.0, 3.0]))
    assert stats == {"mds_mean": 2.0, "mds_std": 1.0}


def test_privacy_ordering_xor_above_mix_and_rising_with_m():
    """XorMixFL §4.2's MDS claims on digits, same seed: XorMixFL's MDS > MixFL's in every
    (M, p) tried, and XorMixFL's MDS rises from M = 1 to M = 3 (dummy labels [3, 4, 5][:M] as in
    Table 3)."""
    xor = {}
    for m in (1, 3):
        for p in (1, 3):
            _, xs = shared("xormixfl", M=m, p=p, dummy_labels=[3, 4, 5])
            _, ms = shared("mixfl", M=m, p=p, dummy_labels=[3, 4, 5])
            assert xs["mds_mean"] > 1.2 * ms["mds_mean"], (m, p, xs, ms)
            xor[m, p] = xs["mds_mean"]
    assert xor[3, 1] > xor[1, 1] and xor[3, 3] > xor[1, 3]


def test_summary_json_has_both_distances(tmp_path):
    fed = digits_federation(SMALL, 4, 0)
    fedshare.simulate("xormixfl", fed, "mlp", rounds=1, train={"local_epochs": 1}, run_dir=tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    for key in ("mds_mean", "mds_std", "mds_upload_mean", "mds_upload_std"):
        assert summary[key] > 0, key
    assert 0 < summary["upload_target_exposed"] < 1
    assert summary["shared_samples"] == 23 and summary["target_labels"] == [9]


def test_user_errors():
    fed = digits_federation(SMALL, 4, 0)
    with pytest.raises(FedshareError, match="rounds=1"):
        fedshare.simulate("xormixfl", fed, "mlp", rounds=2)
    with pytest.raises(FedshareError, match="server pseudo-client"):
        fedshare.simulate("standalone", digits_federation("iid", 4, 0), "mlp", rounds=1)
    with pytest.raises(FedshareError, match="multi_dummy_mode"):
        fedshare.simulate(make_strategy("xormixfl", {"multi_dummy_mode": "x"}), fed, rounds=1)
    with pytest.raises(FedshareError, match="M=10"):
        fedshare.simulate(make_strategy("xormixfl", {"M": 10}), fed, "mlp", rounds=1)
    with pytest.raises(FedshareError, match="dummy_labels"):
        fedshare.simulate(make_strategy("mixfl", {"dummy_labels": [9]}), fed, "mlp", rounds=1)
    with pytest.raises(FedshareError, match="mix_order"):
        fedshare.simulate(make_strategy("mixfl", {"mix_order": "x"}), fed, "mlp", rounds=1)
    with pytest.raises(FedshareError, match="mix_ratio"):
        fedshare.simulate(make_strategy("mixfl", {"mix_ratio": 1.0}), fed, "mlp", rounds=1)


# --------------------------------------------------------- reduced orderings (XorMixFL §4.1, §4.3)
def test_reduced_digits_orderings():
    """XorMixFL above standalone and one-shot Vanilla FL in test accuracy and far above both
    in target-label accuracy; MixFL not far below XorMixFL. Mean of 3 seeds (a few seconds)."""
    acc: dict[str, list[float]] = {}
    target: dict[str, list[float]] = {}
    for name in ("standalone", "fedavg", "xormixfl", "mixfl"):
        for seed in range(3):
            h = run(name, seed).history[-1]
            acc.setdefault(name, []).append(h["accuracy"])
            target.setdefault(name, []).append(h["per_class_accuracy"][9])
    a = {k: sum(v) / len(v) for k, v in acc.items()}
    t = {k: sum(v) / len(v) for k, v in target.items()}
    assert a["xormixfl"] > a["standalone"] and a["xormixfl"] > a["fedavg"], a
    assert t["xormixfl"] > 1.5 * t["standalone"] and t["xormixfl"] > t["fedavg"], t
    assert a["mixfl"] > a["xormixfl"] - 2.0, a


def test_table_presets_compose_and_run(tmp_path):
    """The Table 2 preset with each method (and Tables 3–4 with XorMixFL/MixFL), shrunk to
    digits; composed and run as `python -m fedshare.run` does (the MNIST runs are in
    test_xormixfl_paper.py)."""
    from hydra import compose, initialize_config_dir

    from fedshare.run import config_dir, execute

    small = ["data=digits", "model=mlp", "partition.n=2", "partition.m=25"]
    small += ["train.local_epochs=1", "progress=false"]
    cases = [(2, s) for s in ("xormixfl", "mixfl", "standalone", "fedavg")]
    cases += [(3, "mixfl"), (4, "xormixfl"), (4, "mixfl")]
    for table, strategy in cases:
        out = tmp_path / f"{table}{strategy}"
        overrides = [f"experiment=xormixfl/table{table}", f"strategy={strategy}", *small]
        with initialize_config_dir(str(config_dir()), version_base="1.3"):
            cfg = compose("config", overrides=[*overrides, f"run_dir={out}"])
        assert cfg.strategy.get("mix_ratio") == (0.5 if table in (3, 4) else None)
        summary = execute(cfg, out, {"partition": "xormix"})
        assert summary["rounds_completed"] == 1 and summary["strategy"] == strategy
        assert ("mds_mean" in summary) == (strategy in ("xormixfl", "mixfl"))
        assert json.loads((out / "summary.json").read_text())["strategy"] == strategy
