"""Fast exact tests of what earlier mutation entries left unlisted (docs/mutation.md,
`data_rest` and `engine_small`): the covariate-shift specs and their application, a
partition's printed statistics, the label-set coverage, the Dirichlet α check; the stacked
clients' tensors, rows and optimizer slots; kept messages' and inboxes' bytes and state; the
traffic record. Tiny synthetic inputs, no simulation."""

from types import MappingProxyType, SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from fedshare.config import TrainConfig
from fedshare.data.dataset import Dataset
from fedshare.data.label_skew import dirichlet, dirichlet_blocks
from fedshare.data.partitioners import Partition
from fedshare.data.pathological import label_set_coverage
from fedshare.data.shift import apply_domain_shift, check_transform, transform_name
from fedshare.engine.accounting import Traffic
from fedshare.engine.batched import StackedOptimizer, StackedRun, _LossOf, grad_of, stacked
from fedshare.engine.client import Client
from fedshare.engine.executors import Executor
from fedshare.engine.kept_messages import Inboxes, KeptMessages
from fedshare.engine.messages import Message
from fedshare.errors import FedshareError
from fedshare.metrics.separability import davies_bouldin


# ------------------------------------------------------------ data/shift.py: transform specs
def test_a_transform_spec_is_returned_as_a_plain_dict_copy():
    for spec in ({"kind": "rotate", "degrees": 90}, MappingProxyType({"kind": "invert"})):
        checked = check_transform(spec, "partition.domains[0]")
        assert type(checked) is dict and checked == dict(spec) and checked is not spec
    assert check_transform({"kind": "noise", "std": 0.1}, "d") == {"kind": "noise", "std": 0.1}


def test_a_transform_spec_that_is_not_a_mapping_is_refused_naming_it():
    with pytest.raises(FedshareError) as err:
        check_transform(["rotate"], "partition.domains[2]")
    assert str(err.value) == (
        "partition.domains[2]=['rotate'] must be a mapping such as {kind: rotate, ...}"
    )


@pytest.mark.parametrize(
    ("spec", "sentence"),
    [
        (
            {"kind": "blur"},
            "d has kind 'blur'; valid kinds: colour, identity, invert, noise, rotate, shift",
        ),
        (
            {"degrees": 3},
            "d has kind None; valid kinds: colour, identity, invert, noise, rotate, shift",
        ),
        (
            {"kind": "identity", "std": 1},
            "d (identity) has unknown key(s) ['std']; its keys are none",
        ),
        (
            {"kind": "rotate", "degrees": 1, "std": 2, "a": 0},
            "d (rotate) has unknown key(s) ['a', 'std']; its keys are ['degrees']",
        ),
        ({"kind": "noise", "seed": 3}, "d (noise) needs ['std']"),
        ({"kind": "colour"}, "d (colour) needs ['gains']"),
        ({"kind": "noise", "std": -0.5}, "d (noise) std=-0.5 must not be negative"),
        ({"kind": "shift", "std": -1e-9}, "d (shift) std=-1e-09 must not be negative"),
    ],
)
def test_a_bad_transform_spec_is_refused_in_one_sentence(spec, sentence):
    with pytest.raises(FedshareError) as err:
        check_transform(spec, "d")
    assert str(err.value) == sentence


@pytest.mark.parametrize("std", [0, 0.5, 1, 2.5])
def test_a_noise_or_shift_std_of_zero_or_more_is_accepted(std):
    for kind in ("noise", "shift"):
        assert check_transform({"kind": kind, "std": std}, "d")["std"] == std


def test_colour_gains_become_floats_and_other_kinds_keep_their_values():
    checked = check_transform({"kind": "colour", "gains": [1, 2]}, "d")
    assert checked["gains"] == [1.0, 2.0] and all(type(g) is float for g in checked["gains"])
    assert type(check_transform({"kind": "rotate", "degrees": 90}, "d")["degrees"]) is int


def test_a_transforms_name_lists_its_values_without_kind_and_seed():
    assert transform_name({"kind": "rotate", "degrees": 90}) == "rotate(90)"
    assert transform_name({"kind": "noise", "std": 0.3, "seed": 5}) == "noise(0.3)"
    assert transform_name({"kind": "colour", "gains": [1.0, 0.5]}) == "colour([1.0, 0.5])"
    assert transform_name({"kind": "shift", "seed": 1, "std": 2}) == "shift(2)"
    assert transform_name({"kind": "invert"}) == "invert"


# ------------------------------------------------------ data/shift.py: the domains applied
def shift_data() -> Dataset:
    x_train = torch.arange(16, dtype=torch.float32).view(8, 2) + 1
    x_test = torch.arange(10, dtype=torch.float32).view(5, 2) + 100
    return Dataset("s", x_train, torch.zeros(8), x_test, torch.zeros(5), 2)


def shift_partition(test: str | None, transforms=None) -> Partition:
    """Four clients (one empty) in domains 0, 1, 0, 1: colour ×2 and invert (unbounded: −x)."""
    indices = [np.array([0, 5]), np.array([1, 2]), np.array([], dtype=np.int64), np.array([6])]
    if transforms is None:
        transforms = [{"kind": "colour", "gains": [2.0]}, {"kind": "invert"}]
    info = {} if test is None else {"test": test}
    counts = np.zeros((4, 2), dtype=np.int64)
    groups = np.array([0, 1, 0, 1])
    return Partition("covariate", {}, indices, 2, counts, groups, "f", None, transforms, info, 8)


def test_each_clients_training_inputs_take_their_domains_transform_once():
    data = shift_data()
    shifted = apply_domain_shift(data, shift_partition("clean"))
    want = data.x_train.clone()
    want[[0, 5]] *= 2  # domain 0: clients 0 and 2
    want[[1, 2, 6]] *= -1  # domain 1: clients 1 and 3
    torch.testing.assert_close(shifted.x_train, want, rtol=0, atol=0)
    assert torch.equal(data.x_train, shift_data().x_train)  # the given dataset is untouched
    assert shifted.x_test is data.x_test  # clean: the test set is the given one


@pytest.mark.parametrize("domains", [2, 3])
def test_a_mixed_test_set_transforms_sample_j_by_domain_j_mod_d(domains):
    data = shift_data()
    transforms = [{"kind": "colour", "gains": [2.0]}, {"kind": "invert"}, {"kind": "identity"}]
    partition = shift_partition("mixed", transforms[:domains])
    partition.groups = np.arange(4) % domains
    shifted = apply_domain_shift(data, partition)
    factor = torch.tensor([[2.0], [-1.0], [1.0]])[torch.arange(5) % domains]
    torch.testing.assert_close(shifted.x_test, data.x_test * factor, rtol=0, atol=0)
    assert torch.equal(data.x_test, shift_data().x_test)  # the given test set is untouched


def test_a_partition_without_transforms_leaves_the_dataset_and_one_without_groups_is_refused():
    data = shift_data()
    plain = shift_partition("mixed")
    plain.transforms = None
    assert apply_domain_shift(data, plain) is data
    grouped = shift_partition(None)
    grouped.groups = None
    with pytest.raises(ValueError, match=r"^a partition with transforms needs groups"):
        apply_domain_shift(data, grouped)
    untested = apply_domain_shift(data, shift_partition(None))  # no "test" key: clean
    assert untested.x_test is data.x_test


# ------------------------------------------------- data/partitioners.py: Partition.describe
def small_partition(**changes) -> Partition:
    """Three clients over six samples of classes 0 0 1 1 2 2 (index 0 used twice, one unused
    of seven), two named groups, transforms and info."""
    fields = {
        "name": "clustered",
        "params": {"group_classes": [1, 2], "client_size": 3},
        "client_indices": [np.array([0, 1, 2]), np.array([3, 4]), np.array([5, 0])],
        "num_classes": 3,
        "class_counts": np.array([[2, 1, 0], [0, 1, 1], [1, 0, 1]]),
        "groups": np.array([0, 1, 0]),
        "fingerprint": "abc123",
        "group_names": ["g0", "g1"],
        "transforms": [{"kind": "identity"}, {"kind": "invert"}],
        "info": {"test": "mixed"},
        "num_samples": 7,
    }
    return Partition(**{**fields, **changes})


STATISTICS = [
    "clients 3  classes 3  sizes min 2 / median 2 / mean 2.3 / max 3  (std 0.5)",
    "classes per client min 2 / mean 2.00 / max 2",
    "training set 7: assigned 7, distinct 6, unused 1, reused 1",
    "samples per class [3, 2, 2]",
    "clients per class [2, 2, 2]",
]
HEADER = "client  group   size |    0    1    2"


def test_describe_prints_the_statistics_groups_transforms_info_and_each_clients_counts():
    assert small_partition().describe().split("\n") == [
        "partition clustered (group_classes=[1, 2], client_size=3)  fingerprint abc123",
        *STATISTICS,
        "groups g0: 2 clients, g1: 1 clients",
        "input transforms per group [{'kind': 'identity'}, {'kind': 'invert'}]",
        "info {'test': 'mixed'}",
        HEADER,
        "     0      0      3 |    2    1    0",
        "     1      1      2 |    0    1    1",
        "     2      0      2 |    1    0    1",
    ]


def test_describe_without_parameters_groups_transforms_or_info():
    plain = small_partition(params={}, groups=None, group_names=None, transforms=None, info={})
    assert plain.describe().split("\n") == [
        "partition clustered (defaults)  fingerprint abc123",
        *STATISTICS,
        HEADER,
        "     0      -      3 |    2    1    0",
        "     1      -      2 |    0    1    1",
        "     2      -      2 |    1    0    1",
    ]


def test_describe_names_unnamed_groups_by_number_up_to_the_largest():
    lines = small_partition(groups=np.array([0, 2, 2]), group_names=None).describe().split("\n")
    assert lines[6] == "groups 0: 1 clients, 1: 0 clients, 2: 2 clients"
    assert lines[-2:] == [
        "     1      2      2 |    0    1    1",
        "     2      2      2 |    1    0    1",
    ]


def test_describe_lists_the_named_groups_when_a_partitioner_names_fewer_than_it_uses():
    lines = small_partition(group_names=["g0"]).describe().split("\n")
    assert lines[6] == "groups g0: 2 clients"
    spare = small_partition(group_names=["g0", "g1", "g2"]).describe().split("\n")
    assert spare[6] == "groups g0: 2 clients, g1: 1 clients, g2: 0 clients"


def test_describe_widens_the_columns_to_the_largest_count():
    big = small_partition(
        client_indices=[np.arange(12345), np.array([0])],
        class_counts=np.array([[12345, 0, 0], [1, 0, 0]]),
        groups=None,
        num_samples=12345,
    )
    assert big.describe().split("\n")[-3:] == [
        "client  group   size |     0     1     2",
        "     0      -  12345 | 12345     0     0",
        "     1      -      1 |     1     0     0",
    ]


def one_sample_clients(clients: int, classes: int) -> Partition:
    counts = np.zeros((clients, classes), dtype=np.int64)
    counts[:, 0] = 1
    indices = [np.array([k]) for k in range(clients)]
    return Partition("iid", {}, indices, classes, counts, fingerprint="f", num_samples=clients)


def test_describe_prints_up_to_twenty_classes_as_columns_and_more_as_a_pointer():
    twenty = one_sample_clients(2, 20).describe().split("\n")
    assert twenty[-3] == "client  group   size | " + " ".join(f"{c:>4}" for c in range(20))
    assert twenty[-1] == "     1      -      1 |    1" + "    0" * 19
    wide = one_sample_clients(2, 21).describe().split("\n")
    assert wide[-1] == "per-client class counts: see partition.json / partition.png"
    assert wide[-2].startswith("clients per class [2, 0, 0") and len(wide) == 7


def test_describe_prints_forty_clients_by_default_and_counts_the_rest():
    forty = one_sample_clients(40, 1).describe().split("\n")
    assert forty[-1] == "    39      -      1 |    1" and len(forty) == 7 + 40
    more = one_sample_clients(41, 1).describe().split("\n")
    assert more[-2:] == ["    39      -      1 |    1", "... (1 more clients in partition.json)"]
    five = one_sample_clients(5, 1).describe(max_rows=2).split("\n")
    assert five[-3:] == [
        "     0      -      1 |    1",
        "     1      -      1 |    1",
        "... (3 more clients in partition.json)",
    ]


# ---------------------------------------------- data/pathological.py, data/label_skew.py
def test_label_set_coverage_counts_distinct_sets_and_the_class_pairs_held_together():
    sets = [np.array([2, 0, 1]), np.array([1, 2]), np.array([3]), np.array([0, 1, 2])]
    got = label_set_coverage(sets, 5)
    # distinct: {0,1,2}, {1,2}, {3}; pairs: 01 02 12; all pairs: C(C−1)/2 = 10
    assert got == {"distinct": 3, "class_pairs_held": 3, "class_pairs": 10}
    assert all(type(v) is int for v in got.values())
    chain = label_set_coverage([np.array([0, 1, 2, 3])], 4)
    assert chain == {"distinct": 1, "class_pairs_held": 6, "class_pairs": 6}
    assert label_set_coverage([np.array([4])], 7)["class_pairs"] == 21


@pytest.mark.parametrize("partitioner", [dirichlet, dirichlet_blocks])
def test_a_dirichlet_alpha_must_be_positive(partitioner):
    labels = np.repeat(np.arange(2), 10)
    for alpha in (0, 0.0, -0.5, -2):
        with pytest.raises(FedshareError) as err:
            partitioner(labels, 2, np.random.default_rng(0), alpha=alpha)
        assert str(err.value) == f"partition.alpha={alpha} must be positive"
    for alpha in (1e-3, 0.5, 1, 3):
        split = partitioner(labels, 2, np.random.default_rng(0), alpha=alpha, min_size=0)
        indices = split.indices if hasattr(split, "indices") else split
        assert sorted(np.concatenate(indices).tolist()) == list(range(20))


# ------------------------------------------------------------------- engine/batched.py
def test_grad_of_is_the_filled_gradient_and_refuses_a_missing_one():
    p = torch.zeros(2, requires_grad=True)
    with pytest.raises(AssertionError):
        grad_of(p)
    p.grad = torch.ones(2)
    assert grad_of(p) is p.grad


def test_the_optimizers_step_counts_exist_only_after_a_step_and_slots_start_at_zero():
    optimizer = StackedOptimizer(TrainConfig(), 0.1)
    with pytest.raises(AssertionError):
        optimizer._steps  # noqa: B018 (the property is the test)
    params = {"w": torch.ones(3, 2, requires_grad=True)}
    params["w"].grad = torch.ones(3, 2)
    optimizer.step(params, torch.tensor([0, 2]))
    assert optimizer._steps.tolist() == [1.0, 0.0, 1.0]
    like = torch.ones(3, 2)
    slot = optimizer._slot("w", "m", like)
    assert torch.equal(slot, torch.zeros(3, 2)) and optimizer._slot("w", "m", like) is slot


def test_stacked_repeats_each_tensor_detached_along_a_new_first_axis():
    w = torch.arange(6.0).view(2, 3).requires_grad_()
    b = torch.tensor(5.0)
    out = stacked({"w": w, "b": b}, 3)
    assert out["w"].shape == (3, 2, 3) and out["b"].shape == (3,)
    assert all(torch.equal(row, w.detach()) for row in out["w"]) and out["b"].tolist() == [5.0] * 3
    assert not out["w"].requires_grad and out["w"].grad_fn is None
    assert stacked({"v": torch.arange(4.0)}, 1)["v"].shape == (1, 4)


def loss_of(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *inputs) -> torch.Tensor:
    return nn.functional.cross_entropy(model(x), y)


def test_loss_of_calls_the_loss_with_the_model_and_the_tensors():
    model = nn.Linear(2, 2)
    seen = []
    wrapper = _LossOf(model, lambda m, *ts: seen.append((m, ts)) or torch.tensor(1.0))
    x, y = torch.ones(1, 2), torch.zeros(1)
    assert wrapper(x, y).item() == 1.0 and seen[0][0] is model and seen[0][1] == (x, y)


def bn_net() -> nn.Module:
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3), nn.Linear(3, 2))
    model[2].bias.requires_grad_(False)
    return model


def stand_in_clients(count: int) -> list[SimpleNamespace]:
    """Clients as a stacked run reads them: each with its own amp device, config and rate."""
    return [
        SimpleNamespace(amp_device=f"amp{i}", train=TrainConfig(momentum=0.1 * i), lr=0.5 + i)
        for i in range(count)
    ]


def test_a_stacked_run_stacks_the_trainable_parameters_and_float_buffers_and_shares_the_rest():
    model = bn_net()
    run = StackedRun(stand_in_clients(3), model, loss_of)
    trainable = ["0.weight", "0.bias", "1.weight", "1.bias", "2.weight"]
    assert list(run.params) == trainable and list(run.buffers) == [
        "1.running_mean",
        "1.running_var",
    ]
    named = dict(model.named_parameters()) | dict(model.named_buffers())
    for name, rows in (run.params | run.buffers).items():
        assert rows.shape == (3, *named[name].shape)
        assert all(torch.equal(row, named[name].detach()) for row in rows)
    assert all(p.requires_grad and p.is_leaf for p in run.params.values())
    assert sorted(run.fixed) == ["model.1.num_batches_tracked", "model.2.bias"]
    assert run.fixed["model.2.bias"] is not None and not run.fixed["model.2.bias"].requires_grad
    assert run.inputs == () and run.model is model


def test_a_stacked_run_keeps_its_client_inputs_as_a_tuple():
    counts = torch.ones(2, 2)
    assert StackedRun(stand_in_clients(2), nn.Linear(2, 2), loss_of, None, counts).inputs == (
        counts,
    )
    pair = (counts, counts * 2)
    assert StackedRun(stand_in_clients(2), nn.Linear(2, 2), loss_of, None, pair).inputs is pair


def test_a_stacked_run_takes_autocast_config_and_rate_from_the_chunks_first_client():
    clients = stand_in_clients(3)
    run = StackedRun(clients, nn.Linear(2, 2), loss_of)
    assert run.amp_device == "amp0"
    assert run.optimizer.train is clients[0].train and run.optimizer.lr == 0.5


def test_start_row_sets_one_rows_parameters_and_statistics_and_load_client_reads_them_back():
    model, other = bn_net(), bn_net()
    with torch.no_grad():
        for p in other.parameters():
            p.add_(1.0)
        other[1].running_mean.fill_(0.25)
        other[1].running_var.fill_(4.0)
    run = StackedRun(stand_in_clients(3), model, loss_of)
    run.start_row(1, other)
    start, moved = bn_net().state_dict(), other.state_dict()
    for name, rows in (run.params | run.buffers).items():
        assert torch.equal(rows[1], moved[name]), name
        assert torch.equal(rows[0], start[name]) and torch.equal(rows[2], start[name]), name
    assert torch.equal(run.fixed["model.2.bias"], start["2.bias"])  # frozen: one shared copy
    loaded = run.load_client(1)
    assert loaded is model
    for name, value in loaded.state_dict().items():
        want = start[name] if name in ("2.bias", "1.num_batches_tracked") else moved[name]
        assert torch.equal(value, want), name
    for name, value in run.load_client(2).state_dict().items():
        assert torch.equal(value, start[name]), name


# -------------------------------------------------- engine/kept_messages.py, accounting.py
def message(*sizes: int) -> Message:
    """A message of float32 weights of sizes[0] values and one payload tensor per other size."""
    weights = torch.zeros(sizes[0]) if sizes[0] else None
    return Message(weights, {f"p{i}": torch.zeros(n) for i, n in enumerate(sizes[1:])})


def test_kept_messages_hold_each_message_once_whoever_keeps_it():
    kept = KeptMessages()
    assert kept.bytes_held == 0
    kept.keep("distribute", message(3, 2), [0, 1, 2])  # 20 bytes, kept by three
    assert kept.bytes_held == 20
    kept.keep("other", message(0, 1, 1), [1])  # 8 bytes
    assert kept.bytes_held == 28
    kept.keep("distribute", message(1), [0, 1, 2])  # the first one is forgotten
    assert kept.bytes_held == 12


def test_inboxes_count_every_waiting_message_and_survive_a_state_round_trip():
    inboxes = Inboxes()
    assert inboxes.bytes_held == 0 and inboxes.state_dict() == {}
    first, second, third = message(2), message(0, 3), message(1, 1)
    inboxes.post(4, first)
    inboxes.post(4, second)
    inboxes.post(1, third)
    assert inboxes.bytes_held == 8 + 12 + 8
    state = inboxes.state_dict()
    assert list(state) == [4, 1] and [m["payload"] for m in state[4]] == [{}, second.payload]
    assert state[4][0]["weights"] is first.weights and state[4][1]["weights"] is None
    restored = Inboxes()
    restored.load_state_dict({str(k): v for k, v in state.items()}, "cpu")
    assert restored.bytes_held == 28
    got = restored.collect(4)
    assert torch.equal(got[0].weights, first.weights) and got[1].weights is None
    assert list(got[1].payload) == ["p0"] and restored.collect(1)[0].payload.keys() == {"p0"}
    assert restored.bytes_held == 0


def test_kept_messages_state_keeps_each_phases_messages_and_who_holds_them():
    kept = KeptMessages()
    kept.keep("distribute", message(2, 1), [3, 5])
    state = kept.state_dict()
    assert list(state["messages"]) == ["distribute"] and state["held"] == {
        3: {"distribute": 0},
        5: {"distribute": 0},
    }
    assert state["messages"]["distribute"][0]["payload"].keys() == {"p0"}


class BatchNormBody(nn.Module):
    """A model whose features differ between train and eval mode (BatchNorm)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(2)
        self.body = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def test_local_separability_scores_the_clients_model_in_eval_mode_on_its_data_and_the_test_set():
    x_train = torch.tensor([[0, 1], [1, 0], [4, 5], [6, 4], [9, 9], [2, 8]], dtype=torch.uint8)
    y_train = torch.tensor([0, 0, 1, 1, 0, 1])
    x_test = torch.tensor([[1, 1], [7, 6], [3, 9], [8, 2]], dtype=torch.uint8)
    y_test = torch.tensor([1, 1, 0, 1])
    data = Dataset("d", x_train, y_train, x_test, y_test, 2, scale=0.5, mean=(1.0,), std=(2.0,))
    model = BatchNormBody().train()
    client = Client(0, 1, torch.tensor([0, 1, 2, 3, 4]), data, model, TrainConfig(), 3)
    executor = Executor(SimpleNamespace(data=SimpleNamespace(dataset=data)))
    got = executor._local_separability(client)
    assert model.training  # the mode is restored
    with torch.no_grad():
        model.eval()
        own = model.features((x_train[:5].float() * 0.5 - 1) / 2)
        test = model.features((x_test.float() * 0.5 - 1) / 2)
    assert got == {
        "local_train_davies_bouldin": davies_bouldin(own, y_train[:5]),
        "local_test_davies_bouldin": davies_bouldin(test, y_test),
    }


def test_traffic_as_dict_names_every_total():
    traffic = Traffic(1, 2, 3, 4, 5)
    assert traffic.as_dict() == {
        "bytes_up": 1,
        "bytes_down": 2,
        "bytes_shared": 3,
        "bytes_down_personal": 4,
        "bytes_peer": 5,
    }
