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
# # Reproducing a paper table from Python
#
# `python -m fedshare.reproduce` runs a paper table's cells as ordinary runs and reports them
# beside the paper's numbers; its parts are importable. Here: FedPFT's Table 2 at its `cpu`
# scale (a stand-in on digits random-ReLU features with a disjoint label shift between two
# clients, not the paper's data), two of its methods and one seed, so that it runs in a
# notebook. The same from the command line:
#
# ```bash
# python -m fedshare.reproduce run fedpft/table2 --scale cpu --methods centralized fedpft_diag_k10 --seeds 0 --out DIR
# python -m fedshare.reproduce report fedpft/table2 DIR
# ```

# %%
import tempfile
from pathlib import Path

from IPython.display import Image, Markdown

from fedshare.reproduce import cells, load_job, measure, run_cells
from fedshare.reproduce.render import plot, tables_markdown

job = load_job("fedpft/table2")
print(job.scale("cpu").note)
chosen = cells("fedpft/table2", "cpu", methods=["centralized", "fedpft_diag_k10"], seeds=[0])
for cell in chosen:
    print(cell.column, cell.method, cell.seed)

# %% [markdown]
# `run_cells` starts the cells that are not finished yet in `out` (a rerun skips them) as
# `fedshare.run` jobs, and returns each cell's state.

# %%
out = Path(tempfile.mkdtemp()) / "fedpft-table2"
for item in run_cells(chosen, out):
    print(item.cell.method, item.state)

# %% [markdown]
# ## Measured beside the paper
#
# `measure` reads the runs back with the paper's number of each cell; the table gives the
# measured mean (seeds in brackets) beside it.

# %%
measured = measure(chosen, job.numbers, out)
Markdown(tables_markdown(measured))

# %%
plot(measured, out / "report.png", "FedPFT Table 2, cpu scale (digits stand-in), seed 0")
Image(filename=str(out / "report.png"))
