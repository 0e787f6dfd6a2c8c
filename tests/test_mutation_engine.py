"""The engine's bookkeeping, pinned exactly (docs/mutation.md, `engine`): who takes part in a
round (cohort size, sampling, availability held for a period and redrawn), the random streams'
seeds, the byte accounting of each direction, the flat state and per-client state, what a
resume may change and which checkpoints it refuses, and how the ranks split a cohort."""

import dataclasses
import zlib

import numpy as np
import pytest
import torch
from torch import nn

from fedshare.engine import checkpoint
from fedshare.engine.accounting import Traffic, message_bytes, payload_bytes, tensor_bytes
from fedshare.engine.client_state import ClientStates
from fedshare.engine.distributed import assign, blocks, detached
from fedshare.engine.flat import FlatState
from fedshare.engine.resume import changed_keys, check_same_run, check_saved_rounds, flatten
from fedshare.engine.rng import derive_seed, numpy_rng, seed_global_torch, torch_generator
from fedshare.engine.sampling import CohortSampler, availability_per_client, cohort_size
from fedshare.errors import FedshareError

# ------------------------------------------------------------------------------- sampling


def test_cohort_size_is_per_round_or_the_floored_fraction_at_least_one():
    assert cohort_size(10, 0.5, 3) == 3  # per_round wins over the fraction
    assert cohort_size(10, 0.5, 1) == 1
    assert cohort_size(10, 0.5, 10) == 10
    assert cohort_size(10, 0.25, None) == 2  # floor(2.5)
    assert cohort_size(100, 0.29, None) == 29  # 0.29 · 100 = 28.999…: the 1e-9 rounds it up
    assert cohort_size(10, 0.01, None) == 1  # floor(0.1) = 0 -> at least one
    assert cohort_size(10, 1.0, None) == 10
    assert cohort_size(7, 1.0, None) == 7


@pytest.mark.parametrize("per_round", [0, 11, -1])
def test_cohort_size_refuses_per_round_outside_one_to_n(per_round):
    with pytest.raises(FedshareError, match=f"per_round={per_round}"):
        cohort_size(10, 0.5, per_round)


@pytest.mark.parametrize("fraction", [0.0, -0.1, 1.01])
def test_cohort_size_refuses_fraction_outside_zero_one(fraction):
    with pytest.raises(FedshareError, match="fraction"):
        cohort_size(10, fraction, None)


def test_availability_is_a_scalar_a_value_per_client_or_per_group():
    np.testing.assert_array_equal(availability_per_client(0.5, None, 3), [0.5, 0.5, 0.5])
    np.testing.assert_array_equal(availability_per_client(1, None, 2), [1.0, 1.0])
    np.testing.assert_array_equal(
        availability_per_client([0.2, 0.4, 1.0], None, 3), [0.2, 0.4, 1.0]
    )
    groups = np.array([0, 1, 1, 0, 1])
    np.testing.assert_array_equal(
        availability_per_client([0.2, 0.9], groups, 5), [0.2, 0.9, 0.9, 0.2, 0.9]
    )


def test_availability_refuses_wrong_lengths_and_values_outside_zero_one():
    with pytest.raises(FedshareError, match="2 values"):
        availability_per_client([0.5, 0.5], None, 3)
    with pytest.raises(FedshareError, match="3 values for 2 client groups"):
        availability_per_client([0.5, 0.5, 0.5], np.array([0, 1, 1]), 3)
    with pytest.raises(FedshareError, match="1 values for 2 client groups"):
        availability_per_client([0.5], np.array([0, 1, 1]), 3)
    for bad in (0.0, -0.5, 1.5, [0.5, 0.0], [1.0, 1.2]):
        with pytest.raises(FedshareError, match=r"in \(0, 1\]"):
            availability_per_client(bad, None, 2)


def test_availability_period_must_be_at_least_one():
    CohortSampler(4, 2, np.ones(4), seed=0, period=1)
    with pytest.raises(FedshareError, match="availability_period=0"):
        CohortSampler(4, 2, np.ones(4), seed=0, period=0)


def test_the_cohort_is_the_sorted_draw_of_the_cohort_stream():
    sampler = CohortSampler(10, 3, np.ones(10), seed=7)
    for r in range(6):
        want = np.sort(numpy_rng(7, "cohort", r).choice(10, size=3, replace=False))
        np.testing.assert_array_equal(sampler.sampled(r), want)
        assert sampler.cohort(r) == want.tolist()  # every client available
    np.testing.assert_array_equal(CohortSampler(5, 5, np.ones(5), 7).sampled(3), np.arange(5))


def test_availability_is_drawn_per_client_and_held_for_the_period():
    probs = np.array([0.1, 0.5, 0.9, 0.3, 0.7, 0.5])
    sampler = CohortSampler(6, 6, probs, seed=3, period=3)
    for r in range(9):
        held = r - r % 3
        for attempt in (0, 2):
            want = numpy_rng(3, "availability", held, attempt).random(6) < probs
            np.testing.assert_array_equal(sampler.available(r, attempt), want)
    assert not np.array_equal(sampler.available(3, 0), sampler.available(6, 0))


def test_availability_is_redrawn_every_round_by_default():
    probs = np.full(6, 0.5)
    sampler = CohortSampler(6, 6, probs, seed=3)
    for r in (0, 1):
        want = numpy_rng(3, "availability", r, 0).random(6) < probs
        np.testing.assert_array_equal(sampler.available(r, 0), want)


def reference_cohort(sampler: CohortSampler, r: int) -> list[int]:
    """The cohort by its definition: the sampled clients, each kept with its availability
    (the draw of `available`), redrawn (next attempt) while nobody is left."""
    sampled = np.sort(
        numpy_rng(sampler.seed, "cohort", r).choice(
            sampler.num_clients, size=sampler.per_round, replace=False
        )
    )
    for attempt in range(100):
        held = r - r % sampler.period
        up = numpy_rng(sampler.seed, "availability", held, attempt).random(sampler.num_clients)
        keep = [int(c) for c in sampled if up[c] < sampler.probs[c]]
        if keep:
            return keep
    raise AssertionError("no client in 100 attempts")


def test_the_cohort_keeps_each_sampled_client_with_its_availability_and_redraws_empty_ones():
    probs = np.array([1.0, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2])  # one client always up
    sampler = CohortSampler(8, 2, probs, seed=1)
    redrawn = 0
    for r in range(40):
        assert sampler.cohort(r) == reference_cohort(sampler, r)
        sampled = sampler.sampled(r)
        redrawn += not sampler.available(r, 0)[sampled].any()
    assert redrawn > 0  # some round needed a second attempt


def test_the_cohort_gives_up_after_ten_thousand_empty_draws(monkeypatch):
    sampler = CohortSampler(4, 2, np.full(4, 0.5), seed=0)
    attempts = []

    def nobody(round_idx, attempt):
        attempts.append(attempt)
        return np.zeros(4, dtype=bool)

    monkeypatch.setattr(sampler, "available", nobody)
    with pytest.raises(RuntimeError, match="10,000"):
        sampler.cohort(0)
    assert attempts == list(range(10_000))


# ------------------------------------------------------------------------------- streams


def test_derived_seeds_are_the_seed_sequence_of_seed_purpose_and_keys():
    seed = 5 * 2**32 + 2**32 - 1  # both 32-bit words used
    words = [2**32 - 1, 5, zlib.crc32(b"cohort"), 4, 1, 0]  # keys 3, 0, -1 -> 4, 1, 0
    state = np.random.SeedSequence(words).generate_state(2, dtype=np.uint32)
    want = (int(state[0]) << 31) ^ int(state[1])
    assert derive_seed(seed, "cohort", 3, 0, -1) == want
    assert 0 <= want < 2**63
    assert derive_seed(seed, "cohort", -1) != derive_seed(seed, "cohort", 0)
    assert derive_seed(seed, "cohort") != derive_seed(seed, "availability")


def test_generators_are_seeded_with_the_derived_seed():
    seed = derive_seed(2, "init", 1, 4)
    want = torch.Generator().manual_seed(seed)
    got = torch_generator(2, "init", 1, 4)
    assert torch.equal(torch.rand(3, generator=got), torch.rand(3, generator=want))
    np.testing.assert_array_equal(
        numpy_rng(2, "init", 1, 4).random(3), np.random.default_rng(seed).random(3)
    )
    seed_global_torch(2, "init", 1, 4)
    first = torch.rand(3)
    torch.manual_seed(seed)
    assert torch.equal(first, torch.rand(3))


# ------------------------------------------------------------------------------- bytes


def test_tensor_and_message_bytes_are_elements_times_their_size():
    assert tensor_bytes(None) == 0
    assert tensor_bytes(torch.zeros(5, dtype=torch.float16)) == 10
    assert tensor_bytes(torch.zeros(3, 2, dtype=torch.float64)) == 48
    payload = {"a": torch.zeros(3, dtype=torch.int8), "b": torch.zeros(2)}
    assert payload_bytes(payload) == 11
    assert payload_bytes({}) == 0
    assert message_bytes(torch.zeros(4), payload) == 27
    assert message_bytes(None, payload) == 11


def test_traffic_counts_each_direction_and_the_shared_payloads():
    weights, payload = torch.zeros(10), {"p": torch.zeros(3)}  # 40 and 12 bytes
    traffic = Traffic()
    traffic.sent_down(weights, payload, receivers=5)
    assert traffic.as_dict() == {
        "bytes_up": 0,
        "bytes_down": 260,
        "bytes_shared": 60,
        "bytes_down_personal": 0,
        "bytes_peer": 0,
    }
    traffic.sent_personal(weights, payload)
    assert (traffic.bytes_down, traffic.bytes_shared, traffic.bytes_down_personal) == (
        312,
        72,
        52,
    )
    traffic.sent_up(weights, payload)
    traffic.sent_up(None, {"q": torch.zeros(2, dtype=torch.float64)})
    assert (traffic.bytes_up, traffic.bytes_shared) == (68, 100)
    traffic.sent_peer(weights, payload)
    assert (traffic.bytes_peer, traffic.bytes_shared, traffic.bytes_up) == (52, 112, 68)
    assert traffic.bytes_down == 312


# ------------------------------------------------------------------------------- state


def bn_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2), nn.Linear(2, 1, bias=False))


def test_flat_state_is_the_floating_entries_in_order_and_loads_back():
    model = bn_model()
    flat_state = FlatState(model)
    assert flat_state.names == [
        "0.weight",
        "0.bias",
        "1.weight",
        "1.bias",
        "1.running_mean",
        "1.running_var",
        "2.weight",
    ]  # not 1.num_batches_tracked
    assert flat_state.sizes == [6, 2, 2, 2, 2, 2, 2]
    assert flat_state.numel == 18
    state = model.state_dict()
    want = torch.cat([state[n].reshape(-1) for n in flat_state.names])
    assert not any(t.requires_grad for t in flat_state.tensors(model))  # detached entries
    assert torch.equal(flat_state.flatten(model), want)
    new = torch.arange(18.0)
    views = flat_state.views(new)
    assert torch.equal(views["0.weight"], new[:6].view(2, 3))
    assert torch.equal(views["2.weight"], new[16:].view(1, 2))
    other = bn_model()
    assert flat_state.load_(other, new) is other
    assert torch.equal(flat_state.flatten(other), new)
    assert torch.equal(other[1].running_var, torch.tensor([14.0, 15.0]))
    with pytest.raises(ValueError, match="17 values, the model 18"):
        flat_state.load_(other, torch.zeros(17))


def test_client_states_keep_what_a_client_left_and_track_changes():
    states = ClientStates()
    assert states.checkout(3, torch.device("cpu")) == {}
    states.checkin(3, {})  # nothing kept, nothing changed
    assert states.take_changed() == set()
    assert states.get(3) is None
    kept = torch.ones(4, requires_grad=True)
    states.checkin(3, {"c": kept * 2})
    states.checkin(5, {"c": torch.zeros(2, dtype=torch.float64)})
    assert states.take_changed() == {3, 5}
    assert states.take_changed() == set()
    assert not states.get(3)["c"].requires_grad
    assert torch.equal(states.checkout(3, torch.device("cpu"))["c"], torch.full((4,), 2.0))
    assert states.bytes_held == 16 + 16
    states.checkin(5, {})  # an emptied state is dropped and counts as a change
    assert states.take_changed() == {5}
    assert states.get(5) is None
    assert [cid for cid, _ in states.items()] == [3]
    states.mark_all_changed()
    assert states.take_changed() == {3}
    states.checkin(9, {"c": torch.zeros(1)})
    states.load_state_dict({"7": {"c": torch.ones(2)}})
    assert [cid for cid, _ in states.items()] == [7]
    assert states.take_changed() == set()


# ------------------------------------------------------------------------------- resume


def test_flatten_gives_dotted_keys():
    assert flatten({"a": 1, "b": {"c": 2, "d": {"e": 3}}}) == {"a": 1, "b.c": 2, "b.d.e": 3}


def test_changed_keys_ignore_the_changeable_ones_and_fill_keys_added_later():
    saved = {"rounds": 5, "train": {"lr": 0.1}, "checkpoint": {"every": 1, "keep": 2}}
    same = {"rounds": 9, "train": {"lr": 0.1}, "checkpoint": {"every": 3, "keep": 2}}
    assert changed_keys(saved, same) == []
    assert changed_keys(saved, {**same, "train": {"lr": 0.2}}) == ["train.lr"]
    assert changed_keys(saved, {**same, "checkpoint": {"every": 1, "keep": 3}}) == [
        "checkpoint.keep"
    ]
    assert changed_keys(saved, {**same, "rounds_x": 1}) == ["rounds_x"]  # not a prefix match
    assert changed_keys({**saved, "old": 1}, same) == ["old"]  # a key on one side only
    assert changed_keys(saved, {**same, "progress": {"bar": True}}) == []  # under a changeable
    # keys newer than the checkpoint: its runs had the listed value
    assert changed_keys(saved, {**same, "train": {"lr": 0.1, "amp": False}}) == []
    assert changed_keys(saved, {**same, "train": {"lr": 0.1, "amp": True}}) == ["train.amp"]
    assert changed_keys(saved, {**same, "logger": None}) == []


def test_check_same_run_refuses_a_missing_or_different_config(tmp_path):
    path = tmp_path / "checkpoint.pt"
    check_same_run({"a": 1}, {"a": 1, "rounds": 3}, path)
    with pytest.raises(FedshareError, match="records no config"):
        check_same_run(None, {"a": 1}, path)
    saved = {f"k{i}": i for i in range(8)}
    with pytest.raises(FedshareError) as err:
        check_same_run(saved, {k: v + 1 for k, v in saved.items()}, path)
    message = str(err.value)
    assert "k5 (5 -> 6)" in message and "k6" not in message and "and 2 more" in message
    seven = {f"k{i}": i for i in range(7)}
    with pytest.raises(FedshareError, match="and 1 more"):
        check_same_run(seven, {k: v + 1 for k, v in seven.items()}, path)
    six = {f"k{i}": i for i in range(6)}
    with pytest.raises(FedshareError) as err:
        check_same_run(six, {k: v + 1 for k, v in six.items()}, path)
    assert "k5 (5 -> 6)" in str(err.value) and "more" not in str(err.value)
    with pytest.raises(FedshareError) as err:
        check_same_run({"a": 1}, {"a": 2}, path)
    assert "a (1 -> 2)" in str(err.value) and "more" not in str(err.value)


def saved(done, rounds):
    return {"rounds_completed": done, "history": [{"round": r} for r in rounds]}


@pytest.mark.parametrize(
    ("done", "rounds", "every"),
    [(4, [2, 4], 2), (5, [2, 4], 2), (1, [], 2), (3, [1, 2, 3], 1), (6, [6], 1)],
)
def test_a_consistent_checkpoint_resumes(done, rounds, every, tmp_path):
    check_saved_rounds(saved(done, rounds), 6, every, tmp_path / "c.pt")


@pytest.mark.parametrize(
    ("done", "rounds", "every"),
    [
        (6, [2, 4], 2),  # a round evaluated after 4 is missing
        (2, [], 2),
        (0, [], 2),
        (True, [], 2),
        (3.0, [], 5),
        (4, [4, 2], 2),  # out of order
        (4, [2, 2, 4], 2),  # twice
        (4, [0, 2, 4], 2),  # round 0
        (3, [2, 4], 2),  # evaluated beyond the completed rounds
        (4, [2, True], 2),
        (4, [True, 2], 3),  # a bool is no round number
        (4, [2, None], 3),
        (4, [2, "4"], 3),
    ],
)
def test_an_inconsistent_checkpoint_is_refused(done, rounds, every, tmp_path):
    with pytest.raises(FedshareError, match="edited or damaged"):
        check_saved_rounds(saved(done, rounds), 6, every, tmp_path / "c.pt")


def test_the_refusal_shows_the_last_five_evaluated_rounds(tmp_path):
    with pytest.raises(FedshareError, match=r"rounds \[3, 4, 5, 6, 7\] \(eval.every=1\)"):
        check_saved_rounds(saved(5, [1, 2, 3, 4, 5, 6, 7]), 9, 1, tmp_path / "c.pt")


def test_a_checkpoint_beyond_the_asked_rounds_is_refused(tmp_path):
    check_saved_rounds(saved(4, [4]), 4, 1, tmp_path / "c.pt")
    with pytest.raises(FedshareError, match="rounds=3"):
        check_saved_rounds(saved(4, [4]), 3, 1, tmp_path / "c.pt")


def full_state(**extra):
    return {key: 1 for key in checkpoint.CHECKPOINT_KEYS} | extra


def test_a_checkpoint_round_trips_and_a_foreign_file_is_named(tmp_path):
    path = tmp_path / "c.pt"
    checkpoint.save_checkpoint(path, full_state(weights=torch.arange(3.0)))
    loaded = checkpoint.load_checkpoint(path)
    assert torch.equal(loaded["weights"], torch.arange(3.0))
    assert list(tmp_path.iterdir()) == [path]  # no temporary left
    with pytest.raises(FedshareError, match="no checkpoint at"):
        checkpoint.load_checkpoint(tmp_path / "none.pt")
    torch.save([1, 2], path)
    with pytest.raises(FedshareError, match="holds a list, not a dict"):
        checkpoint.load_checkpoint(path)
    torch.save({"rounds_completed": 1, "strategy": 1}, path)
    with pytest.raises(FedshareError, match="no history, traffic, wall_time_s, rng, fingerprint"):
        checkpoint.load_checkpoint(path)
    path.write_bytes(b"")
    with pytest.raises(FedshareError, match="empty or truncated"):
        checkpoint.load_checkpoint(path)


@dataclasses.dataclass
class Foreign:
    value: int = 1


def test_a_checkpoint_is_loaded_with_tensors_and_plain_values_only(tmp_path):
    path = tmp_path / "c.pt"
    torch.save(full_state(extra=Foreign()), path)
    with pytest.raises(FedshareError, match="holds objects other than tensors"):
        checkpoint.load_checkpoint(path)


@pytest.mark.parametrize("available", [False, True])
def test_the_rng_state_has_cuda_streams_only_where_cuda_is_available(monkeypatch, available):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: ["streams"])
    state = checkpoint.rng_state()
    assert torch.equal(state["torch"], torch.get_rng_state())
    assert state.get("cuda") == (["streams"] if available else None)


def test_load_problems_are_named_by_their_kind():
    import pickle

    assert "empty" in checkpoint.torch_load_problem(EOFError())
    assert "damaged" in checkpoint.torch_load_problem(pickle.UnpicklingError())
    assert checkpoint.torch_load_problem(OSError(13, "Permission denied")) == "Permission denied"
    assert checkpoint.torch_load_problem(OSError()) == "OSError"
    assert "not written by torch.save" in checkpoint.torch_load_problem(ValueError())


@pytest.mark.parametrize(("free", "error"), [(0, "No space left"), (1 << 20, "could not write")])
def test_a_failed_save_on_a_full_disk_is_a_full_disk(monkeypatch, tmp_path, free, error):
    import shutil

    def fail(state, tmp):
        raise RuntimeError("write failed")

    monkeypatch.setattr(torch, "save", fail)
    monkeypatch.setattr(shutil, "disk_usage", lambda p: shutil._ntuple_diskusage(1, 1, free))
    with pytest.raises(OSError, match=error):
        checkpoint.save_checkpoint(tmp_path / "c.pt", {})


def test_the_rng_state_restores_torchs_stream():
    state = checkpoint.rng_state()
    first = torch.rand(3)
    checkpoint.restore_rng_state(state)
    assert torch.equal(torch.rand(3), first)


@pytest.mark.parametrize(("saved_cuda", "available"), [(True, False), (False, True)])
def test_the_cuda_streams_are_restored_only_where_saved_and_present(
    monkeypatch, saved_cuda, available
):
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", calls.append)
    state = {"torch": torch.get_rng_state()} | ({"cuda": ["saved"]} if saved_cuda else {})
    checkpoint.restore_rng_state(state)
    assert calls == []
    if available:
        checkpoint.restore_rng_state({**state, "cuda": ["saved"]})
        assert calls == [["saved"]]


# ------------------------------------------------------------------------------- ranks


def test_assign_puts_the_largest_client_on_the_least_loaded_rank():
    assert assign([5, 3, 3, 1], 2) == [0, 1, 1, 0]
    assert assign([1, 3, 3, 5], 2) == [0, 1, 1, 0]  # largest first, not cohort order
    assert assign([2, 2], 2) == [0, 1]  # ties: the lower position onto the lower rank
    assert assign([3, 0, 0, 0], 2) == [0, 1, 1, 1]  # an empty client weighs one sample
    assert assign([4, 4, 4], 3) == [0, 1, 2]
    assert assign([], 2) == []
    assert assign([0, 0], 2) == [0, 1]  # empty clients weigh one: not all on rank 0


def test_blocks_cut_the_cohort_where_the_running_count_nears_each_share():
    assert blocks([1, 1, 1, 1], 2) == [0, 0, 1, 1]
    assert blocks([1] * 6, 3) == [0, 0, 1, 1, 2, 2]
    assert blocks([6, 1, 1, 1, 1], 2) == [0, 1, 1, 1, 1]
    assert blocks([1, 1, 1, 6], 2) == [0, 0, 0, 1]
    assert blocks([0, 0, 2], 2) == [0, 0, 1]  # an empty client weighs one sample
    assert blocks([0, 2, 0, 0], 2) == [0, 0, 1, 1]
    assert blocks([0, 0], 2) == [0, 1]
    assert blocks([5], 2) == [1]  # one client: its midpoint is at half the total


@dataclasses.dataclass
class Message:
    weights: torch.Tensor
    extra: dict


def test_detached_copies_every_tensor_and_keeps_the_containers():
    base = torch.arange(10.0, requires_grad=True)
    view = base[2:4] * 1
    message = Message(view, {"a": [base[:2], (base[5:6],)], "n": 3})
    copy = detached(message)
    assert isinstance(copy, Message) and copy.extra["n"] == 3
    assert isinstance(copy.extra["a"], list) and isinstance(copy.extra["a"][1], tuple)
    for got, want in ((copy.weights, view), (copy.extra["a"][0], base[:2])):
        assert torch.equal(got, want) and not got.requires_grad
        assert got.untyped_storage().data_ptr() != base.untyped_storage().data_ptr()
        assert got.untyped_storage().nbytes() == got.numel() * 4  # compact
    assert detached(Message) is Message  # a class is not an instance
