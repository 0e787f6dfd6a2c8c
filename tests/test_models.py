"""The model zoo: split points, parameter counts, input checks, pretrained weights, configs."""

from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from conftest import data_root_or_skip
from fedshare.errors import FedshareError
from fedshare.models import MODELS, BlockModel, build_model, prepare_for_device
from fedshare.models.resnet_cifar import PRETRAINED_FILE, PRETRAINED_MEAN, PRETRAINED_STD

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "model"

# name -> (input shape, classes): every registered model, at the size its paper used.
CASES: dict[str, tuple[tuple[int, ...], int]] = {
    "mlp": ((4, 3), 5),
    "linear": ((12,), 5),
    "cnn_small": ((1, 8, 8), 10),
    "cnn_mnist": ((1, 28, 28), 10),
    "lenet_fmnist": ((1, 28, 28), 10),
    "lenet_cifar": ((3, 32, 32), 10),
    "mobilenetv2_cifar": ((3, 32, 32), 10),
    "audionet": ((2, 64, 344), 10),
    "harnet": ((1, 128, 3), 6),
    "resnet20_cifar": ((3, 32, 32), 10),
    "resnet18": ((3, 32, 32), 10),
    "resnet50": ((3, 32, 32), 10),
    "fedaa_cnn": ((3, 32, 32), 10),
    "cnn4": ((1, 28, 28), 10),
    "resnet8": ((1, 8, 8), 10),
}


def build(name: str, **params: object) -> BlockModel:
    torch.manual_seed(0)
    shape, classes = CASES[name]
    return build_model(name, shape, classes, params)


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_every_registered_model_is_covered():
    assert set(MODELS.names()) == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_decode_of_encode_equals_forward_at_every_split(name):
    model = build(name)
    shape, _ = CASES[name]
    x = torch.randn(3, *shape)
    with torch.no_grad():
        model.train()(x)  # move BatchNorm running statistics away from their initial values
        model.eval()
        out = model(x)
        for split in range(model.num_blocks + 1):
            assert torch.equal(model.decode(model.encode(x, split), split), out), split
        assert torch.equal(model.blocks["head"](model.features(x)), out)
    assert model.block_names[-1] == "head"
    assert 0 <= model.share_layer < model.num_blocks


# Parameter counts: FLea's App. C.2 Tables 3–6 (with BatchNorm running-statistics values), ReBaFL's
# Sec. 5.1, docs/xormixfl.md, docs/models.md (ResNet-20 checkpoint), FedAA's Sec. 4.
@pytest.mark.parametrize(
    ("name", "params", "bn_values"),
    [
        ("mobilenetv2_cifar", 2_296_922, 35_088),
        ("harnet", 691_974, 1_408),
        ("audionet", 25_602, 240),
        ("lenet_fmnist", 117_066, 0),
        ("lenet_cifar", 107_680, 0),
        ("cnn_mnist", 1_199_882, 0),
        ("resnet20_cifar", 269_722, None),
        ("fedaa_cnn", 2_948_554, 0),
    ],
)
def test_parameter_counts_match_the_specs(name, params, bn_values):
    model = build(name)
    assert n_params(model) == params
    if bn_values is not None:
        stats = sum(b.numel() for k, b in model.named_buffers() if "num_batches" not in k)
        assert stats == bn_values


@pytest.mark.parametrize(
    ("name", "shared"),
    [
        ("mobilenetv2_cifar", (16, 32, 32)),  # FLea's App. C.2, Table 3: CIFAR activations
        ("audionet", (16, 16, 86)),  # UrbanSound8K
        ("harnet", (128, 20, 7)),  # UCI-HAR
        ("lenet_fmnist", (128,)),  # ReBaFL's h
        ("lenet_cifar", (128,)),
        ("resnet20_cifar", (64,)),
        ("resnet50", (2048,)),
    ],
)
def test_default_share_layer_gives_the_papers_activations(name, shared):
    model = build(name).eval()
    x = torch.randn(2, *CASES[name][0])
    assert model.encode(x, model.share_layer).shape[1:] == shared


# FLea's split per model: an early block, never the head's input (FLea's App. C.2).
FLEA_SPLITS: dict[str, tuple[list[str], tuple[int, ...]]] = {
    "mobilenetv2_cifar": (["stem", "block1"], (16, 32, 32)),  # the paper's, `--layer 0`
    "audionet": (["conv1", "conv2"], (16, 16, 86)),  # the paper's, `--layer 1`
    "harnet": (["conv1", "conv2"], (128, 20, 7)),  # the paper's, `--layer 1`
    "cnn_small": (["conv1"], (32, 4, 4)),
    "cnn_mnist": (["conv1"], (32, 26, 26)),
    "lenet_fmnist": (["conv1"], (16, 12, 12)),
    "lenet_cifar": (["conv1"], (16, 14, 14)),
    "resnet20_cifar": (["stem", "layer1"], (16, 32, 32)),
    "resnet18": (["stem", "layer1"], (64, 8, 8)),
    "resnet50": (["stem", "layer1"], (256, 8, 8)),
    "mlp": (["fc1"], (200,)),
    "fedaa_cnn": (["conv1"], (64, 14, 14)),
    "cnn4": (["conv1"], (32, 12, 12)),
    "resnet8": (["stem", "layer1"], (16, 8, 8)),
}


def test_every_model_with_a_body_has_a_flea_split():
    assert set(FLEA_SPLITS) == set(CASES) - {"linear"}
    assert build("linear").flea_layer is None  # no body: FLea refuses it


@pytest.mark.parametrize("name", sorted(FLEA_SPLITS))
def test_flea_split_is_an_early_block_not_the_penultimate_one(name):
    model = build(name).eval()
    blocks, shape = FLEA_SPLITS[name]
    assert model.flea_layer is not None and 0 < model.flea_layer < model.penultimate
    assert model.block_names[: model.flea_layer] == blocks
    with torch.no_grad():
        assert model.encode(torch.randn(2, *CASES[name][0]), model.flea_layer).shape[1:] == shape


def test_flea_share_layer_is_after_the_first_inverted_residual_block():
    model = build("mobilenetv2_cifar")
    assert model.block_names[: model.share_layer] == ["stem", "block1"]
    assert model.block_names[-4:] == ["block17", "conv_last", "pool", "head"]


def test_width_multiplier_shrinks_channels():
    quarter = build("harnet", width=0.25)  # FLea's Table 6 at width 1/4: 16/32/64/64
    x = torch.randn(2, 1, 128, 3)
    assert quarter.eval().encode(x, 2).shape[1:] == (32, 20, 7)
    assert n_params(quarter) < n_params(build("harnet")) / 10
    for name in ("mobilenetv2_cifar", "audionet", "lenet_fmnist", "lenet_cifar"):
        small = build(name, width=0.5)
        assert n_params(small) < n_params(build(name)) / 2
        assert small.eval()(torch.randn(2, *CASES[name][0])).shape == (2, CASES[name][1])


@pytest.mark.parametrize(
    ("name", "shape"),
    [
        ("mobilenetv2_cifar", (1, 28, 28)),
        ("mobilenetv2_cifar", (3072,)),
        ("harnet", (128, 3)),
        ("harnet", (1, 32, 3)),
        ("audionet", (64, 344)),
        ("lenet_fmnist", (784,)),
        ("lenet_cifar", (3, 8, 8)),
        ("cnn_mnist", (1, 4, 4)),
        ("cnn_small", (1, 2, 2)),
        ("resnet20_cifar", (20,)),
        ("resnet18", (3, 32)),
    ],
)
def test_bad_input_shape_is_one_clear_sentence(name, shape):
    with pytest.raises(FedshareError) as err:
        build_model(name, shape, 10)
    message = str(err.value)
    assert name in message and str(tuple(shape)) in message
    assert "\n" not in message


def test_bad_share_layer_and_unknown_option_are_user_errors():
    with pytest.raises(FedshareError, match="share_layer=9"):
        build_model("audionet", (2, 64, 344), 10, {"share_layer": 9})
    with pytest.raises(FedshareError, match="no parameter 'depth'"):
        build_model("harnet", (1, 128, 3), 6, {"depth": 3})


def test_freeze_fixes_everything_but_the_head():
    model = build("resnet20_cifar", freeze=True)
    trainable = [k for k, p in model.named_parameters() if p.requires_grad]
    assert trainable == ["blocks.head.weight", "blocks.head.bias"]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.train()
    assert model.training and not model.blocks["layer1"].training
    model(torch.randn(4, 3, 32, 32)).sum().backward()
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before if not k.startswith("blocks.head"))


@pytest.mark.parametrize("name", ["mobilenetv2_cifar", "resnet20_cifar", "harnet", "audionet"])
def test_channels_last_and_autocast_give_the_same_predictions(name):
    model = build(name, **({"width": 0.25} if name != "resnet20_cifar" else {})).eval()
    x = torch.randn(4, *CASES[name][0])
    with torch.no_grad():
        ref = model(x)
        prepare_for_device(model, "cpu", channels_last=True)
        conv = next(m for m in model.modules() if isinstance(m, torch.nn.Conv2d))
        assert conv.weight.is_contiguous(memory_format=torch.channels_last)
        torch.testing.assert_close(model(x), ref, rtol=1e-4, atol=1e-4)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = model(x)
    assert low.dtype == torch.bfloat16 and torch.isfinite(low).all()
    torch.testing.assert_close(low.float(), ref, rtol=0.1, atol=0.1)


def cifar_sample_accuracy(model: torch.nn.Module, root: Path) -> float:
    data = np.load(root / "cifar10_sample" / "test.npz")
    x = torch.from_numpy(data["x"]).permute(0, 3, 1, 2).float() / 255
    mean, std = (torch.tensor(v).view(1, 3, 1, 1) for v in (PRETRAINED_MEAN, PRETRAINED_STD))
    x, y = (x - mean) / std, torch.from_numpy(data["y"])
    with torch.no_grad():
        predictions = torch.cat([model(batch).argmax(1) for batch in x.split(250)])
    return float((predictions == y).float().mean())


def test_resnet20_checkpoint_loads_and_scores_about_91_percent():
    root = data_root_or_skip(PRETRAINED_FILE, "cifar10_sample/test.npz")
    model = build_model(
        "resnet20_cifar", (3, 32, 32), 10, {"pretrained": True, "data_root": str(root)}
    )
    accuracy = cifar_sample_accuracy(model.eval(), root)
    assert accuracy >= 0.90, accuracy  # docs/models.md: 91.5% on these 1,000 images
    by_path = build_model(
        "resnet20_cifar", (3, 32, 32), 10, {"pretrained": str(root / PRETRAINED_FILE)}
    )
    assert all(
        torch.equal(a, b)
        for a, b in zip(model.state_dict().values(), by_path.state_dict().values(), strict=True)
    )


def test_resnet20_pretrained_backbone_with_a_new_head():
    root = data_root_or_skip(PRETRAINED_FILE)
    params = {"pretrained": str(root), "freeze": True}
    model = build_model("resnet20_cifar", (3, 32, 32), 100, params)
    assert model.head.out_features == 100
    assert [k for k, p in model.named_parameters() if p.requires_grad] == [
        "blocks.head.weight",
        "blocks.head.bias",
    ]


def test_missing_or_corrupt_weights_are_user_errors(tmp_path):
    with pytest.raises(FedshareError, match="not found"):
        build_model("resnet20_cifar", (3, 32, 32), 10, {"pretrained": str(tmp_path / "no.th")})
    corrupt = tmp_path / "resnet20-12fca82f.th"
    corrupt.write_bytes(b"not a checkpoint")
    with pytest.raises(FedshareError, match="corrupt"):
        build_model("resnet20_cifar", (3, 32, 32), 10, {"pretrained": str(corrupt)})
    with pytest.raises(FedshareError, match="3-channel"):
        build_model("resnet20_cifar", (1, 32, 32), 10, {"pretrained": str(corrupt)})
    with pytest.raises(FedshareError, match=r"expects C×32×32 \(CIFAR-sized\) images"):
        build_model("resnet20_cifar", (1, 8, 8), 10)


class NotATensor:
    """An arbitrary object: the safe loader must refuse to unpickle it."""


def test_weights_loader_refuses_arbitrary_objects(tmp_path):
    unsafe = tmp_path / "unsafe.pth"
    torch.save({"fc.weight": NotATensor()}, unsafe)
    with pytest.raises(FedshareError, match="safely"):
        build_model("resnet18", (3, 32, 32), 10, {"weights": str(unsafe)})


def test_torchvision_backbone_loads_a_local_state_dict(tmp_path):
    from torchvision import models as tv

    torch.manual_seed(1)
    reference = tv.resnet18().eval()
    path = tmp_path / "resnet18-local.pth"
    torch.save(reference.state_dict(), path)
    x = torch.randn(2, 3, 32, 32)
    same = build_model("resnet18", (3, 32, 32), 1000, {"weights": str(path)}).eval()
    with torch.no_grad():
        assert torch.equal(same(x), reference(x))
        new_head = build_model("resnet18", (3, 32, 32), 10, {"weights": str(path)}).eval()
        assert new_head(x).shape == (2, 10)
        assert torch.equal(new_head.features(x), same.features(x))
    with pytest.raises(FedshareError, match="does not fit"):
        build_model("resnet50", (3, 32, 32), 10, {"weights": str(path)})
    tuned = tv.resnet18(num_classes=10).eval()  # a checkpoint whose head has 10 classes
    torch.save(tuned.state_dict(), path)
    with torch.no_grad():
        loaded = build_model("resnet18", (3, 32, 32), 10, {"weights": str(path)}).eval()
        assert torch.equal(loaded(x), tuned(x))


@pytest.mark.parametrize("config", sorted(p.stem for p in CONFIGS.glob("*.yaml")))
def test_every_model_config_builds_its_model(config):
    node = OmegaConf.load(CONFIGS / f"{config}.yaml")
    cfg = OmegaConf.to_container(
        OmegaConf.create({"data": {"root": None}, "model": node}), resolve=True
    )["model"]
    name = cfg.pop("name")
    if name == "auto":
        return
    assert name == config
    shape, classes = CASES[name]
    model = build_model(name, shape, classes, cfg)
    assert model.head is model.blocks["head"]


def test_dataset_default_model_names_are_registered():
    for name in ("mobilenetv2_cifar", "lenet_fmnist", "audionet", "harnet", "cnn_small"):
        assert name in MODELS
