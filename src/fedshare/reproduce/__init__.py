"""`python -m fedshare.reproduce`: one command per paper table (list, run, report, docs).

The cells of a table are data (`fedshare/paper/jobs/`, read by `jobs`); `launch` runs the
missing ones as ordinary `fedshare.run` jobs through Hydra's launchers, `measure` reads them
back beside the paper's numbers and `render` prints them as the paper does. See
docs/reproduce.md.
"""

from fedshare.reproduce.jobs import Cell, available_jobs, cells, load_job
from fedshare.reproduce.launch import run_cells
from fedshare.reproduce.measure import Measured, measure

__all__ = ["Cell", "Measured", "available_jobs", "cells", "load_job", "measure", "run_cells"]
