"""model.pt (issue 34 item 8, issue 48): the final global model, loadable with
weights_only=True and rebuilt by `fedshare.load_model(run_dir)` as a model of raw inputs."""

import pytest
import torch

import fedshare
from fedshare.data.dataset import Dataset
from fedshare.engine.evaluation import evaluate
from fedshare.results.model_file import RawInputModel
from helpers import digits_federation


def raw_accuracy(model: torch.nn.Module, dataset: Dataset) -> float:
    """Percent of the raw test inputs `model` classifies right, as the engine counts them."""
    with torch.no_grad():
        hits = model(dataset.x_test).argmax(dim=1) == dataset.y_test
    return 100.0 * float(hits.float().sum()) / len(dataset.y_test)


def test_load_model_gives_back_the_final_global_model(tmp_path):
    fed = digits_federation(num_clients=3)
    params = {"channels": [8, 16], "hidden": 32}
    result = fedshare.simulate("fedavg", fed, "cnn_small", 2, model_params=params, run_dir=tmp_path)
    state = torch.load(tmp_path / "model.pt", weights_only=True)
    assert state["model"] == "cnn_small" and state["params"] == params
    model = fedshare.load_model(tmp_path)
    final = result.strategy.global_model()
    for key, value in final.state_dict().items():
        assert torch.equal(model.network.state_dict()[key], value.cpu())
    accuracy = evaluate(model.network, fed.dataset, 512, False)["accuracy"]
    assert accuracy == result.final_accuracy


def test_the_loaded_model_on_raw_test_inputs_scores_the_runs_accuracy(tmp_path):
    fed = digits_federation({"name": "dirichlet", "alpha": 0.5}, num_clients=4)
    result = fedshare.simulate("fedavg", fed, "cnn_small", 3, run_dir=tmp_path)
    model = fedshare.load_model(tmp_path)
    assert fed.dataset.mean is not None  # digits are normalised: raw inputs differ
    assert raw_accuracy(model, fed.dataset) == result.final_accuracy
    assert raw_accuracy(model.network, fed.dataset) != result.final_accuracy


def test_the_preparation_is_the_datasets_bit_for_bit():
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (5, 3, 4, 4), dtype=torch.uint8, generator=gen)
    mean, std = (0.49, 0.48, 0.45), (0.25, 0.24, 0.26)
    y = torch.zeros(5, dtype=torch.long)
    dataset = Dataset("toy", x, y, x, y, 2, scale=1 / 255, mean=mean, std=std)
    model = RawInputModel(torch.nn.Identity(), 1 / 255, list(mean), list(std))
    assert torch.equal(model.prepare(x), dataset.prepare(x))
    plain = Dataset("toy", x, y, x, y, 2)
    assert torch.equal(RawInputModel(torch.nn.Identity(), 1.0, None, None)(x), plain.prepare(x))


def test_load_model_of_a_folder_without_a_run_says_so(tmp_path):
    with pytest.raises(fedshare.FedshareError, match=r"model\.pt does not exist"):
        fedshare.load_model(tmp_path)


def test_a_model_file_without_its_preparation_is_refused_with_the_way_out(tmp_path):
    fed = digits_federation(num_clients=3)
    fedshare.simulate("fedavg", fed, "mlp", 1, run_dir=tmp_path)
    state = torch.load(tmp_path / "model.pt", weights_only=True)
    del state["input"]
    torch.save(state, tmp_path / "model.pt")
    with pytest.raises(fedshare.FedshareError, match=r"dataset\.prepare\(x\)"):
        fedshare.load_model(tmp_path)
