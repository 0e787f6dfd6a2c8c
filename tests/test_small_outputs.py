"""Small outputs a user reads (issue 34 item 8): the short repr of `FederatedData`, and the
picture of a one-shot run (its numbers, not a single dot on a round axis)."""

from fedshare.results import plots
from helpers import digits_federation


def test_federated_data_repr_is_one_short_line():
    fed = digits_federation({"name": "dirichlet", "alpha": 0.3}, num_clients=5)
    text = repr(fed)
    sizes = fed.client_sizes
    assert text == (
        "FederatedData(digits: 1,437 train / 360 test, 10 classes, input 1×8×8; partition "
        f"dirichlet(alpha=0.3) over 5 clients, {min(sizes)}–{max(sizes)} samples each; "
        "server data: none)"
    )
    assert str(fed) == text and "tensor" not in text


def test_a_one_shot_runs_picture_states_its_numbers(tmp_path, monkeypatch):
    record = {"round": 1, "accuracy": 67.78, "loss": 1.234567, "bytes_up": 3e6, "bytes_down": 1e6,
              "bytes_shared": 2.5e6}  # fmt: skip
    assert plots.single_round_lines(record) == [
        "round 1 (the only evaluated round)",
        "test accuracy 67.78 %",
        "test loss 1.2346",
        "sent 4.00 MB up+down",
        "of which shared (not weights) 2.50 MB",
    ]
    drawn = []
    monkeypatch.setattr(plots, "_plot_single_round", lambda *args: drawn.append(args))
    plots.plot_learning_curve([record], tmp_path / "curves.png")
    assert len(drawn) == 1 and not (tmp_path / "curves.png").exists()
    monkeypatch.undo()
    plots.plot_learning_curve([record], tmp_path / "curves.png", "fedpft on digits")
    assert (tmp_path / "curves.png").stat().st_size > 1000
