"""`train.amp` (bf16 autocast of the local losses) and `train.compile` (a compiled worker):
what each changes and what it keeps (docs/performance.md)."""

import pytest
import torch
import torch.nn.functional as F

from fedshare import simulate
from fedshare.engine.training import fit
from helpers import DIGITS_TRAIN, digits_federation


def run(**train: object):
    fed = digits_federation("iid", 4)
    return simulate("fedavg", fed, "cnn_small", rounds=3, train={**DIGITS_TRAIN, **train})


def test_fit_runs_the_loss_in_bf16_and_keeps_float32_weights():
    model = torch.nn.Linear(4, 3)
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    seen = []

    def loss_fn(_: int) -> torch.Tensor:
        out = model(x)
        seen.append(out.dtype)
        return F.cross_entropy(out, y)

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    fit(optimizer, range(2), loss_fn, amp_device="cpu")
    fit(optimizer, range(1), loss_fn)
    assert seen == [torch.bfloat16, torch.bfloat16, torch.float32]
    assert model.weight.dtype == torch.float32 and model.weight.grad.dtype == torch.float32


def test_amp_learns_like_float32_but_is_not_the_same_run():
    plain, amp = run(), run(amp=True)
    assert amp.summary["final_accuracy"] > 70  # ~10 % by chance
    assert abs(amp.summary["final_accuracy"] - plain.summary["final_accuracy"]) < 5
    weights = zip(amp.strategy.model.parameters(), plain.strategy.model.parameters(), strict=True)
    assert any(not torch.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in weights)


@pytest.mark.slow  # torch.compile takes tens of seconds on a CPU
def test_compiled_worker_is_the_same_run_up_to_rounding():
    plain, compiled = run(), run(compile=True)
    trained = compiled.strategy.model.parameters(), plain.strategy.model.parameters()
    for a, b in zip(*trained, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert compiled.summary["bytes_up"] == plain.summary["bytes_up"]
