"""`check_saved_rounds`: a checkpoint's completed rounds must agree with its own history."""

from pathlib import Path

import pytest

from fedshare.engine.resume import check_saved_rounds
from fedshare.errors import FedshareError

PATH = Path("run/checkpoint.pt")


def state(done, rounds) -> dict:
    return {"rounds_completed": done, "history": [{"round": r} for r in rounds]}


@pytest.mark.parametrize(
    ("done", "rounds", "every"),
    [(2, [1, 2], 1), (3, [2], 2), (1, [], 2), (5, [2, 4], 2)],
)
def test_a_consistent_checkpoint_passes(done, rounds, every):
    check_saved_rounds(state(done, rounds), rounds=10, every=every, path=PATH)


@pytest.mark.parametrize(
    ("done", "rounds", "every"),
    [
        (2, [2, 1], 1),  # history out of order
        (2, [1, 1, 2], 1),  # a round twice
        (2, [1, 2.0], 1),  # a round that is not an integer
        (2, [True, 2], 1),  # a boolean is not a round
        (2, [0, 2], 1),  # rounds count from 1
        (True, [1], 1),  # a boolean is not a count
        (0, [], 1),  # nothing completed is no checkpoint
        (None, [1], 1),  # no count at all
        (1, [2], 1),  # evaluated past the completed rounds
        (4, [2], 2),  # a round that should have been evaluated is missing
    ],
)
def test_an_edited_checkpoint_is_refused(done, rounds, every):
    with pytest.raises(FedshareError, match="edited or damaged"):
        check_saved_rounds(state(done, rounds), rounds=10, every=every, path=PATH)


def test_a_checkpoint_past_the_asked_rounds_is_refused():
    with pytest.raises(FedshareError, match="has 3 rounds completed but rounds=2"):
        check_saved_rounds(state(3, [3]), rounds=2, every=1, path=PATH)
