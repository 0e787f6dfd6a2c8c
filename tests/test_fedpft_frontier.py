"""scripts/fedpft_frontier.py: the frontier plot reads the `frontier` scale's run folders."""

import json
from pathlib import Path

from fedshare.reproduce import cells
from helpers import load_script


def _fake_run(folder: Path, rounds: int, records: list[dict], summary: dict) -> None:
    folder.mkdir(parents=True)
    status = {"status": "completed", "rounds": rounds}
    (folder / "summary.json").write_text(json.dumps({**status, **summary}))
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_the_plot_reads_bytes_per_round_and_a_one_shot_runs_final_download(tmp_path):
    frontier = load_script("fedpft_frontier")
    by_method = {c.method: c for c in cells("fedpft/table5", "frontier", seeds=[0])}
    one_shot = tmp_path / by_method["fedpft"].folder
    _fake_run(
        one_shot,
        1,
        [{"round": 1, "accuracy": 90.0, "bytes_up": 1000, "bytes_down": 0}],
        {"bytes_up": 1000, "bytes_down": 500, "bytes_peer": 0},
    )
    multi = tmp_path / by_method["fedavg"].folder
    records = [
        {"round": k, "accuracy": a, "bytes_up": 1000 * k, "bytes_down": 1000 * k, "bytes_peer": 0}
        for k, a in ((1, 40.0), (2, 60.0))
    ]
    _fake_run(multi, 2, records, {"bytes_up": 2000, "bytes_down": 2000})
    assert frontier.curve(one_shot) == ([0.0015], [90.0], False)  # the download counted
    assert frontier.curve(multi) == ([0.002, 0.004], [40.0, 60.0], True)
    frontier.plot(tmp_path, 0, tmp_path / "frontier.png")  # the other cells: not run, left out
    assert (tmp_path / "frontier.png").stat().st_size > 0
