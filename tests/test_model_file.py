"""model.pt (issue 34 item 8): the final global model, loadable with weights_only=True and
rebuilt by `fedshare.load_model(run_dir)`."""

import pytest
import torch

import fedshare
from fedshare.engine.evaluation import evaluate
from helpers import digits_federation


def test_load_model_gives_back_the_final_global_model(tmp_path):
    fed = digits_federation(num_clients=3)
    params = {"channels": [8, 16], "hidden": 32}
    result = fedshare.simulate("fedavg", fed, "cnn_small", 2, model_params=params, run_dir=tmp_path)
    state = torch.load(tmp_path / "model.pt", weights_only=True)
    assert state["model"] == "cnn_small" and state["params"] == params
    model = fedshare.load_model(tmp_path)
    final = result.strategy.global_model()
    for key, value in final.state_dict().items():
        assert torch.equal(model.state_dict()[key], value.cpu())
    accuracy = evaluate(model, fed.dataset, 512, False)["accuracy"]
    assert accuracy == pytest.approx(result.final_accuracy)


def test_load_model_of_a_folder_without_a_run_says_so(tmp_path):
    with pytest.raises(fedshare.FedshareError, match=r"model\.pt does not exist"):
        fedshare.load_model(tmp_path)
