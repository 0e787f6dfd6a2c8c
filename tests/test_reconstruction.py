"""The reconstruction attack's decoders (FLea's App. D, Fig. 9(c)): the closed-form ridge decoder
and the refusal of unknown decoders."""

import pytest
import torch

from fedshare.config import api
from fedshare.errors import FedshareError
from fedshare.privacy.reconstruction import reconstruction_attack, ridge_decoder
from helpers import digits_federation


def linear_data(n: int, d: int, p: int, noise: float, seed: int = 0) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    weights = torch.randn(d, p, generator=gen) / d**0.5
    f_train, f_test = torch.randn(n, d, generator=gen), torch.randn(n, d, generator=gen)
    targets = [
        f @ weights + 0.5 + noise * torch.randn(n, p, generator=gen) for f in (f_train, f_test)
    ]
    return f_train, targets[0], f_test, targets[1]


def test_ridge_recovers_a_linear_map_from_more_dimensions_than_samples():
    f_train, t_train, f_test, t_test = linear_data(n=300, d=120, p=6, noise=0.01)
    result = ridge_decoder(f_train, t_train, f_test, t_test)
    assert result.relative_test_mse < 0.01  # the targets' variance is ≈ 1, the noise's 1e-4
    assert result.penalty is not None and len(result.curve) > 1


def test_ridge_learns_nothing_from_activations_independent_of_the_input():
    _, t_train, _, t_test = linear_data(n=200, d=400, p=5, noise=0.0)
    gen = torch.Generator().manual_seed(1)
    unrelated = torch.randn(200, 400, generator=gen), torch.randn(200, 400, generator=gen)
    result = ridge_decoder(unrelated[0], t_train, unrelated[1], t_test)
    assert result.relative_test_mse > 0.95
    assert result.baseline_mse == pytest.approx(float((t_test - t_train.mean(0)).square().mean()))


def test_ridge_leave_one_out_error_equals_refitting_without_each_sample():
    f_train, t_train, f_test, t_test = linear_data(n=15, d=30, p=2, noise=0.3)
    result = ridge_decoder(f_train, t_train, f_test, t_test, penalties=(0.5,))
    f, t = f_train.double(), t_train.double()
    scale = float(torch.linalg.eigvalsh((f - f.mean(0)) @ (f - f.mean(0)).T).clamp_min(0).mean())
    errors = []
    for i in range(15):
        keep = [j for j in range(15) if j != i]
        fk, tk = f[keep], t[keep]
        fm, tm = fk.mean(0), tk.mean(0)
        # the same fit on 14 samples, the penalty scaled by the full set's mean eigenvalue
        gram = (fk - fm) @ (fk - fm).T
        alpha = torch.linalg.solve(gram + 0.5 * scale * torch.eye(14, dtype=f.dtype), tk - tm)
        prediction = (f[i] - fm) @ ((fk - fm).T @ alpha) + tm
        errors.append((prediction - t[i]).square().mean())
    assert result.curve[0] == pytest.approx(float(torch.stack(errors).mean()), rel=1e-9)


def test_attack_runs_each_decoder_and_refuses_unknown_ones():
    fed = digits_federation(num_clients=4)
    model = api.init_model("cnn_small", fed, 0, {"share_layer": 1})
    for decoder in ("ridge", "dense"):
        result = reconstruction_attack(
            model, fed.dataset, train_size=200, test_size=100, epochs=2, decoder=decoder
        )
        assert result.test_mse > 0 and result.baseline_mse > 0
    with pytest.raises(FedshareError, match=r"'conv'.*dense, table5, ridge"):
        reconstruction_attack(model, fed.dataset, decoder="conv")
