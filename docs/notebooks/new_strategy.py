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
# # Writing a new strategy in a notebook
#
# A strategy says what a client does and what the server does; the engine owns the loop,
# the seeds, the byte counting and the files. This one keeps FedAvg's client step and
# replaces its server step by the coordinate-wise median of the clients' weights
# (Yin et al., "Byzantine-robust distributed learning", ICML 2018, the median option of
# Algorithm 1), a robust stand-in for the mean. It is registered under a name on the fly, so
# `fedshare.simulate` takes it like a built-in one.

# %%
from collections.abc import Iterable
from dataclasses import dataclass

import matplotlib.pyplot as plt
import torch

import fedshare
from fedshare.strategies.base import STRATEGIES, Update, register_strategy
from fedshare.strategies.fedavg import FedAvg

if "fedmedian" not in STRATEGIES:  # the notebook may run this cell twice

    @register_strategy("fedmedian")
    @dataclass
    class FedMedian(FedAvg):
        """FedAvg's local training; the server takes the coordinate-wise median of the
        cohort's flat weight vectors instead of their sample-weighted mean."""

        def aggregate(self, updates: Iterable[Update], round_idx: int) -> None:
            weights = torch.stack([update.weights for update in updates])
            self.load_weights(self.model, weights.median(dim=0).values)

# %% [markdown]
# ## Beside FedAvg
#
# Digits split over 10 clients by a Dirichlet(0.3) draw of label proportions, all of them
# every round, 15 rounds; the same seed, so both methods start from the same model and see
# the same batches.

# %%
data = fedshare.federate(
    fedshare.load_dataset({"name": "digits"}), {"name": "dirichlet", "alpha": 0.3}, 10, seed=0
)
results = {name: fedshare.simulate(name, data, "cnn_small", rounds=15, seed=0) for name in
           ["fedavg", "fedmedian"]}
for name, result in results.items():
    print(f"{name}: final {result.final_accuracy:.2f} %, best {result.summary['best_accuracy']:.2f} %")

# %%
fig, ax = plt.subplots(figsize=(5.5, 3.5), layout="constrained")
for name, result in results.items():
    ax.plot([h["round"] for h in result.history], [h["accuracy"] for h in result.history],
            marker=".", label=name)
ax.set(xlabel="round", ylabel="test accuracy (%)", title="digits, Dir(0.3), 10 clients")
ax.legend()
plt.show()

# %% [markdown]
# The median throws away what only a few clients' updates carry. Under label skew those are
# the classes few clients hold, so compare the two final accuracies above before calling a
# robust aggregator free.
#
# To make it a permanent part of the library, the class goes into its own file under
# `src/fedshare/strategies/`, with its parameters in `configs/strategy/fedmedian.yaml`, so the
# command line finds it too (`python -m fedshare.run strategy=fedmedian`): the site's page
# "Adding a strategy" lists the protocol (broadcast, client update, aggregate, phases).
