# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # What sharing costs in privacy: FLea's activations and FedProto's prototypes
#
# FLea (Xia et al., KDD 2024) has every client share the activations of a fixed 10 % of its
# samples at an early layer l, with their labels, through a buffer the server rebuilds each
# round (§3). Two measures of what that gives away are in `fedshare.privacy`:
#
# * the **distance correlation** dCor(x, f) between the inputs x and what is shared of them,
#   f = θ[:l](x): 1 when f determines x up to a rigid map, near 0 when they are independent.
#   FLea adds λ2·dCor to the local loss to push it down (§3.3, Eq. 8).
# * the **exposure**: the share of (owner, receiver) client pairs where the owner's
#   activations reached the receiver, and the share of each client's samples that were ever
#   shared.
#
# FedProto (Tan et al., AAAI 2022) shares something else: each client uploads, per class it
# holds, its *prototype*, the mean penultimate feature of its samples of that class, with the
# class count (§"Federated Prototype Learning", Algorithm 1). One vector per class, no sample
# of its own: the last section measures what those prototypes reveal of the clients' inputs
# at the level where they leak, the class, and compares it with FLea's per-sample dCor.
#
# The setting: `experiment=flea/cpu` cut to 10 rounds — digits, 10 clients × 2 classes × 80
# samples, half of them a round, E = 2, SGD 0.05 with momentum 0.9, the small CNN (FLea's
# split after `conv1`) — against FedAvg on the same split.

# %%
import matplotlib.pyplot as plt
import torch

import fedshare
from fedshare.functional.prototypes import unpack
from fedshare.privacy.dcor import mean_distance_correlation
from fedshare.privacy.exposure import expected_pair_exposure
from fedshare.strategies.fedproto import FedProto

SPLIT = {"name": "pathological", "classes_per_client": 2, "per_class": 80}
data = fedshare.federate(fedshare.load_dataset({"name": "digits"}), SPLIT, 10, seed=0)
TRAIN = {"local_epochs": 2, "batch_size": 32, "optimizer": "sgd", "lr": 0.05, "momentum": 0.9}
runs = {
    name: fedshare.simulate(
        name, data, "cnn_small", rounds=10, seed=0, clients={"fraction": 0.5}, train=TRAIN
    )
    for name in ["flea", "fedavg"]
}
flea = runs["flea"]
for name, result in runs.items():
    print(f"{name}: final {result.final_accuracy:.2f} %, "
          f"shared {result.summary['bytes_shared'] / 1e6:.3f} MB")

# %% [markdown]
# ## Per round: the buffer's dCor and the pair exposure
#
# `shared_dcor` is the mean dCor between the buffer's activations and their source inputs
# (chunks of 32); `exposure_pairs` the directed pair exposure, which for a sampling rate q
# grows as 1 − (1 − q²)^(t−1) (`expected_pair_exposure`).

# %%
history = [h for h in flea.history if "shared_dcor" in h]
rounds = [h["round"] for h in history]
fig, (dcor_ax, pairs_ax) = plt.subplots(1, 2, figsize=(9, 3.2), layout="constrained")
dcor_ax.plot(rounds, [h["shared_dcor"] for h in history], marker=".")
dcor_ax.set(xlabel="round", ylabel="dCor(inputs, shared activations)", ylim=(0, 1))
pairs_ax.plot(rounds, [h["exposure_pairs"] for h in history], marker=".", label="measured")
pairs_ax.plot(rounds, [expected_pair_exposure(r + 1, 0.5) for r in rounds], "--",
              label="1 − (1 − q²)^(t−1), q = 0.5")
pairs_ax.set(xlabel="round", ylabel="pair exposure", ylim=(0, 1))
pairs_ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## Layer by layer: how much of the input each split would give away
#
# The final global models of both runs, on 320 training inputs: the dCor between the inputs
# and the activations after each block. FLea's λ2·dCor term acts at its split (after
# `conv1`); FedAvg's model never shares activations and was not trained to hide them.

# %%
x = data.dataset.prepare(data.dataset.x_train[:320])
layers = {}
for name, result in runs.items():
    model = result.strategy.global_model().eval()
    with torch.no_grad():
        layers[name] = [
            mean_distance_correlation(x, model.encode(x, upto), chunk=32)
            for upto in range(1, model.num_blocks)
        ]
names = model.block_names[: model.num_blocks - 1]
fig, ax = plt.subplots(figsize=(5.5, 3.5), layout="constrained")
for offset, (name, values) in zip([-0.2, 0.2], layers.items(), strict=True):
    ax.bar([i + offset for i in range(len(values))], values, width=0.4, label=name)
ax.set_xticks(range(len(names)), [f"after {n}" for n in names])
ax.set(ylabel="dCor(inputs, activations)", ylim=(0, 1))
ax.legend()
plt.show()
for name, values in layers.items():
    print(name, " ".join(f"{v:.3f}" for v in values))

# %% [markdown]
# ## Whose samples were shared
#
# The fraction of each client's samples that entered the buffer at least once (its fixed
# subset S_k, 10 % of its data, once it took part in a round).

# %%
fractions = flea.summary["exposure_data_per_client"]
fig, ax = plt.subplots(figsize=(5.5, 2.8), layout="constrained")
ax.bar(range(len(fractions)), fractions)
ax.set(xlabel="client", ylabel="samples shared (fraction)")
plt.show()
print({k: round(v, 3) for k, v in flea.summary.items() if k.startswith("exposure_")
       and not isinstance(v, list)})

# %% [markdown]
# ## A prototype method: what FedProto's prototypes reveal
#
# FedProto on the same split, 2 rounds with every client each round (so that every client has
# uploaded), the same local training. A subclass records what the server receives: each
# client's last upload, its (class → prototype) pairs. A prototype is one vector per class,
# so no single sample is shared (sample-level exposure 0); what it can leak is the class:
# the client's mean input of that class.
#
# The measure: over the n = 20 (client, class) pairs a client holds (10 clients × 2
# classes), x̄ is the client's mean prepared input of the class and p the prototype it sent
# for it; **class-level dCor** = dCor(x̄, p) over these 20 pairs (the same
# `mean_distance_correlation`, one chunk). dCor's finite-sample bias depends on n, so each
# value is shown beside its **shuffled baseline**: the mean dCor over 200 random re-pairings
# of the same vectors (what independence gives at that n), and the permutation p-value (the
# share of re-pairings at least as high). FLea's per-sample value is the
# dCor between 32 inputs and their activations after `conv1` (the split it shares), from its
# final model, beside the same baseline at n = 32.

# %%
class RecordedFedProto(FedProto):
    """FedProto that keeps each client's last upload as the server received it."""

    def absorb(self, update):
        protos, _, mask = unpack(update.payload, self.num_classes, self.feature_dim, "cpu")
        self.received[update.client_id] = (protos, mask)
        super().absorb(update)


recorder = RecordedFedProto()
recorder.received = {}
proto_run = fedshare.simulate(
    recorder, data, "cnn_small", rounds=2, seed=0, clients={"fraction": 1.0}, train=TRAIN
)
print(f"fedproto: final {proto_run.final_accuracy:.2f} % (a personal model of 2 classes), "
      f"shared {proto_run.summary['bytes_shared'] / 1e6:.3f} MB, "
      f"{len(recorder.received)} clients uploaded")

dataset = data.dataset
mean_inputs, prototypes, pair_class = [], [], []
for client, (protos, mask) in sorted(recorder.received.items()):
    idx = data.client_indices[client]
    x_client, y_client = dataset.prepare(dataset.x_train[idx]), dataset.y_train[idx]
    for c in torch.nonzero(mask).flatten().tolist():
        mean_inputs.append(x_client[y_client == c].flatten(1).mean(0))
        prototypes.append(protos[c])
        pair_class.append(c)
mean_inputs, prototypes = torch.stack(mean_inputs), torch.stack(prototypes)


def with_baseline(sources, shared, permutations=200):
    """dCor(sources, shared) over all rows, its mean over random re-pairings, and the share
    of re-pairings at least as high (the permutation p-value)."""
    n = sources.shape[0]
    generator = torch.Generator().manual_seed(0)
    shuffled = [
        mean_distance_correlation(sources, shared[torch.randperm(n, generator=generator)], chunk=n)
        for _ in range(permutations)
    ]
    value = mean_distance_correlation(sources, shared, chunk=n)
    p_value = sum(s >= value for s in shuffled) / permutations
    return value, sum(shuffled) / permutations, p_value


flea_model = flea.strategy.global_model().eval()
with torch.no_grad():
    flea_shared = flea_model.encode(x[:32], 1)
measures = {
    "FLea: samples → activations\n(n = 32)": with_baseline(x[:32], flea_shared),
    f"FedProto: class means → prototypes\n(n = {len(pair_class)})": with_baseline(
        mean_inputs, prototypes
    ),
}
for label, (value, baseline, p_value) in measures.items():
    print(f"{label.replace(chr(10), ' ')}: dCor {value:.3f}, "
          f"shuffled baseline {baseline:.3f}, p = {p_value:.3f}")

# %% [markdown]
# Left, the two dCor values beside their baselines. Right, what the class-level dCor
# correlates: for every two (client, class) pairs, the distance between their mean inputs
# against the distance between their prototypes. Two clients' mean inputs of one class lie
# close together; their prototypes much less so, because each FedProto client computes its
# prototypes with its own personal model (a different feature space per client, pulled
# together only by the λ·distance-to-global-prototype term). The class-level dCor measures
# how much of the inputs' geometry the prototypes still keep; read it against its baseline,
# which at n = 20 high-dimensional vectors is far from 0.

# %%
fig, (bar_ax, scatter_ax) = plt.subplots(1, 2, figsize=(10, 3.6), layout="constrained")
positions = range(len(measures))
bar_ax.bar([i - 0.2 for i in positions], [v for v, _, _ in measures.values()], width=0.4,
           label="dCor")
bar_ax.bar([i + 0.2 for i in positions], [b for _, b, _ in measures.values()], width=0.4,
           label="shuffled baseline", color="0.7")
bar_ax.set_xticks(list(positions), list(measures), fontsize=8)
bar_ax.set(ylabel="distance correlation", ylim=(0, 1))
bar_ax.legend(fontsize=8)
input_distances = torch.cdist(mean_inputs, mean_inputs)
prototype_distances = torch.cdist(prototypes, prototypes)
upper = torch.triu_indices(len(pair_class), len(pair_class), offset=1)
classes = torch.tensor(pair_class)
same = classes[upper[0]] == classes[upper[1]]
for selection, label in [(~same, "different classes"), (same, "same class, two clients")]:
    scatter_ax.scatter(input_distances[upper[0], upper[1]][selection],
                       prototype_distances[upper[0], upper[1]][selection], s=12, label=label)
scatter_ax.set(xlabel="distance between mean inputs", ylabel="distance between prototypes")
scatter_ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# What each method exposes, at the two levels: the share of a client's samples that left
# it (FLea: its 10 % subset once it took part; FedProto: none, a prototype is a mean), and the
# share of the (client, class) pairs it holds whose class mean left it in some form (FedProto:
# every held class of every client that took part).

# %%
held = sum(int((dataset.y_train[i].bincount() > 0).sum()) for i in data.client_indices)
print(f"sample-level exposure: FLea {flea.summary['exposure_data_mean']:.3f}, FedProto 0.000")
print(f"class-level: FedProto shared {len(pair_class)} of {held} held (client, class) pairs")
