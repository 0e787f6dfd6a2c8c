"""The context-identification attack of FLea's Fig. 9(d) (flea.md §7, §8 item 27)."""

import pytest
import torch

from fedshare.data.dataset import Dataset
from fedshare.errors import FedshareError
from fedshare.models import build_model
from fedshare.privacy.context import ContextAttack, context_attack, stamp

pytestmark = pytest.mark.usefixtures("one_thread")


def noise_images(n: int = 600) -> Dataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 200, (n, 3, 16, 16), generator=g, dtype=torch.uint8)
    y = torch.zeros(n, dtype=torch.long)
    return Dataset("noise", x, y, x[:300].clone(), y[:300], 1, scale=1 / 255)


def test_the_marker_is_a_full_intensity_square_in_channel_zero():
    data = noise_images(4)
    marked = stamp(data.x_train, data)
    assert (marked[:, 0, 2:7, 2:7] == 255).all()
    changed = marked != data.x_train
    changed[:, 0, 2:7, 2:7] = False
    assert not changed.any() and not (data.x_train[:, 0, 2:7, 2:7] == 255).all()
    with pytest.raises(FedshareError, match="at least 7×7"):
        stamp(torch.zeros(2, 1, 5, 5), data)


@pytest.mark.parametrize("view", ["raw", "average", "features"])
def test_the_attacker_finds_the_marker_when_it_shows(view):
    data = noise_images()
    model = build_model("cnn_small", (3, 16, 16), 2) if view == "features" else None
    result = context_attack(data, view, model, sizes=(40, 300), test_size=200, epochs=20, seed=0)
    assert set(result.accuracy) == {40, 300}
    assert result.accuracy[300] >= 90.0
    assert result.samples_for(90.0) in (40, 300)


def test_reading_off_the_samples_needed():
    attack = ContextAttack({100: 60.0, 300: 91.0, 1000: 99.0})
    assert attack.samples_for(90) == 300 and attack.samples_for(99.5) is None
    with pytest.raises(FedshareError, match="view 'pixels' is not one of: raw, average"):
        context_attack(noise_images(10), "pixels")
