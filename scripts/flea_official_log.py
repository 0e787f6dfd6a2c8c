"""Turn the FLea authors' UCI-HAR training log into `fedshare/paper/logs/<name>.json`.

The authors' repository (github.com/XTxiatong/FLea) ships one real training log,
`models/logs/FLea_HAR_K150_Dir0.1.log` (flea.md spec, header and §8 item 20): FLea on UCI-HAR,
K = 150, Dir(0.1), seed 0. It prints the partition (per client: class fractions and size) and
the global test accuracy after every round (round 0 is the warm-up). This script keeps those
facts as numbers, so runs can be compared with the authors' own run:

    git -C <FLea clone> show HEAD:models/logs/FLea_HAR_K150_Dir0.1.log > flea_har.log
    python scripts/flea_official_log.py flea_har.log --commit <FLea commit> \
        --out src/fedshare/paper/logs/flea_har_k150_dir0.1.json
"""

import argparse
import json
import re
from pathlib import Path
from typing import Any

CLIENT_ROW = re.compile(r"^Client\s+(\d+),([\d.,]+)$")
ACCURACY = re.compile(r"^Global Model Acc on global data: ([\d.]+) length of data: (\d+)")


def parse(text: str) -> dict[str, Any]:
    """Partition (class counts per client) and per-round accuracy (percent) of one log."""
    class_counts: list[list[int]] = []
    accuracy: list[float] = []
    test_size = None
    for line in text.splitlines():
        if (row := CLIENT_ROW.match(line.strip())) is not None:
            *fractions, size = row.group(2).split(",")
            counts = [round(float(f) * int(size)) for f in fractions]
            if sum(counts) != int(size):
                raise ValueError(f"client {row.group(1)}: class fractions do not give {size}")
            class_counts.append(counts)
        elif (acc := ACCURACY.match(line.strip())) is not None:
            accuracy.append(round(100 * float(acc.group(1)), 4))
            test_size = int(acc.group(2))
    return {"class_counts": class_counts, "accuracy": accuracy, "test_size": test_size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--commit", required=True, help="the FLea repository commit read")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    parsed = parse(args.log.read_text())
    record = {
        "source": "github.com/XTxiatong/FLea models/logs/FLea_HAR_K150_Dir0.1.log",
        "commit": args.commit,
        "run": "FLea, UCI-HAR, K = 150, 15 per round, Dir(0.1), E = 5, b = 32, seed 0",
        "preset": "flea/uci_har_dir0.1_n50",
        "method": "flea",
        "note": "accuracy[0] is the warm-up round (fedshare's round 1); class_counts are the "
        "printed class fractions times the client's size",
        **parsed,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=None, separators=(",", ":")) + "\n")
    print(f"{len(parsed['class_counts'])} clients, {len(parsed['accuracy'])} rounds -> {args.out}")


if __name__ == "__main__":
    main()
