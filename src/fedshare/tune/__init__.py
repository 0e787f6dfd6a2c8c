"""Equal-budget hyperparameter tuning on a validation split: `python -m fedshare.tune`
(docs/tuning.md). `space` reads a strategy's search space (`configs/tune/`), `study` runs the
Optuna trials and the reruns on the test seeds, `tuned` writes and applies the tuned file."""
