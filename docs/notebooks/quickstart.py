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
# # Quick start: a FedAvg run from Python
#
# The command line's first experiment, `python -m fedshare.run experiment=digits_quickstart`,
# from Python: FedAvg on scikit-learn's digits (bundled, no download), 10 IID clients, 20
# rounds of one local epoch, the small CNN, SGD at 0.05 with momentum 0.9. `fedshare.simulate`
# resolves its settings exactly as the command line does, so both give the same numbers.

# %%
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import torch

import fedshare

dataset = fedshare.load_dataset({"name": "digits"}, seed=0)
data = fedshare.federate(dataset, "iid", num_clients=10, seed=0)
print(data)

# %% [markdown]
# ## The run
#
# `run_dir` makes it write the same folder as the command line (`summary.json`,
# `metrics.jsonl`, `curves.png`, `model.pt`, …); without it, nothing is written.

# %%
run_dir = Path(tempfile.mkdtemp()) / "fedavg-digits"
result = fedshare.simulate(
    "fedavg",
    data,
    "cnn_small",
    rounds=20,
    seed=0,
    clients={"num": 10},
    train={"local_epochs": 1, "batch_size": 32, "lr": 0.05, "momentum": 0.9},
    run_dir=run_dir,
)
print(f"final {result.final_accuracy:.2f} %, best {result.summary['best_accuracy']:.2f} %")

# %% [markdown]
# ## Its curves
#
# `result.history` holds one record per evaluated round: the test accuracy and loss of the
# global model and the running totals of the bytes sent.

# %%
rounds = [h["round"] for h in result.history]
fig, (acc, sent) = plt.subplots(1, 2, figsize=(9, 3.2), layout="constrained")
acc.plot(rounds, [h["accuracy"] for h in result.history], marker=".")
acc.set(xlabel="round", ylabel="test accuracy (%)", title="FedAvg on digits, 10 IID clients")
megabytes = [(h["bytes_up"] + h["bytes_down"]) / 1e6 for h in result.history]
sent.plot(rounds, megabytes, marker=".", color="C1")
sent.set(xlabel="round", ylabel="MB sent (up + down)", title="communication")
plt.show()

# %% [markdown]
# ## The saved model, evaluated on the test set
#
# `fedshare.load_model` gives back the final global model behind the dataset's input
# preparation (scale and per-channel normalisation): it takes the raw test tensors as stored
# and scores exactly the run's final accuracy.

# %%
model = fedshare.load_model(run_dir)
with torch.no_grad():
    predicted = model(dataset.x_test).argmax(dim=1)
loaded_accuracy = 100.0 * float((predicted == dataset.y_test).float().sum()) / len(dataset.y_test)
print(f"loaded model on the raw test set: {loaded_accuracy:.2f} %")
assert loaded_accuracy == result.final_accuracy

# %% [markdown]
# `model.network` is the bare network: it expects prepared inputs (`dataset.prepare(x)`).
# Fed raw inputs it scores much lower, which is the mistake the wrapper prevents.

# %%
with torch.no_grad():
    bare = model.network(dataset.x_test).argmax(dim=1)
    prepared = model.network(dataset.prepare(dataset.x_test)).argmax(dim=1)
for name, guess in [("bare network, raw inputs", bare), ("bare network, prepared", prepared)]:
    print(f"{name}: {100.0 * float((guess == dataset.y_test).float().mean()):.2f} %")
