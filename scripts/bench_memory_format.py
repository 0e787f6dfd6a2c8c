"""One SGD step (batch 32) of every convolutional model of the zoo, with its weights stored
contiguous (PyTorch's default) and channels-last, interleaved; the best of `--repeats` timings
of `--steps` steps each. The engine's `memory_format=auto` follows these measurements
(docs/performance.md).

    python scripts/bench_memory_format.py --threads 1
"""

import argparse
import time

import torch

from fedshare.models import build_model

CASES = [
    ("cnn_small", (1, 28, 28), {}),
    ("cnn_mnist", (1, 28, 28), {}),
    ("lenet_fmnist", (1, 28, 28), {}),
    ("lenet_cifar", (3, 32, 32), {}),
    ("fedaa_cnn", (3, 32, 32), {}),
    ("resnet20_cifar", (3, 32, 32), {}),
    ("mobilenetv2_cifar", (3, 32, 32), {}),
    ("audionet", (2, 64, 344), {}),
    ("harnet", (1, 128, 3), {}),
]


def step_ms(name: str, shape: tuple, options: dict, channels_last: bool, steps: int) -> float:
    torch.manual_seed(0)
    model = build_model(name, shape, 10, options)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    x, y = torch.randn(32, *shape), torch.randint(0, 10, (32,))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for i in range(steps + 3):
        if i == 3:
            start = time.perf_counter()
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    return (time.perf_counter() - start) / steps * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print("| model | contiguous ms/step | channels-last ms/step | speed-up |")
    print("|---|---|---|---|")
    for name, shape, options in CASES:
        times: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(args.repeats):
            for layout in (False, True):
                times[layout].append(step_ms(name, shape, options, layout, args.steps))
        plain, last = min(times[False]), min(times[True])
        print(f"| {name} | {plain:.1f} | {last:.1f} | {plain / last:.2f}× |")


if __name__ == "__main__":
    main()
