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
# # What sharing costs in privacy: FLea's activations
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
# The setting: `experiment=flea/cpu` cut to 10 rounds — digits, 10 clients × 2 classes × 80
# samples, half of them a round, E = 2, SGD 0.05 with momentum 0.9, the small CNN (FLea's
# split after `conv1`) — against FedAvg on the same split.

# %%
import matplotlib.pyplot as plt
import torch

import fedshare
from fedshare.privacy.dcor import mean_distance_correlation
from fedshare.privacy.exposure import expected_pair_exposure

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
