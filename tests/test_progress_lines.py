"""Progress in logs (issue 34 item 3): when output is not a terminal (nohup, SLURM, CI), one
line per round with the round, accuracy, loss, bytes so far and time per round; a slow round
adds lines naming its stage, FedAA's server steps included."""

import json
import re
import subprocess
import sys

from fedshare import simulate
from fedshare.config.api import init_model
from fedshare.engine import progress
from helpers import digits_federation
from test_fedaa import QUICK, SMALL_CNN, TRAIN, islands

PHASES = ("train", "second")
"""FedAA's client phases: local training, then the pass against the client's identifier."""
LINE = re.compile(
    r"^fedavg round (\d)/3  acc +([\d.]+)%  loss ([\d.]+)  sent ([\d.]+) MB  [\d.]+s/round$"
)


def test_a_piped_run_prints_one_line_per_round(tmp_path):
    command = [
        sys.executable, "-m", "fedshare.run", "experiment=digits_quickstart", "rounds=3",
        "progress=true", f"run_dir={tmp_path}",
    ]  # fmt: skip
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.strip().splitlines()
    records = [json.loads(r) for r in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(lines) == 4 and lines[-1].startswith("fedavg on digits/iid: final")
    for line, record in zip(lines, records, strict=False):
        number, accuracy, loss, sent = LINE.match(line).groups()
        assert int(number) == record["round"]
        assert float(accuracy) == round(record["accuracy"], 2)
        assert float(loss) == round(record["loss"], 4)
        assert float(sent) == round((record["bytes_up"] + record["bytes_down"]) / 1e6, 2)
    assert "it/s" not in proc.stderr and "round/s" not in proc.stderr  # no tqdm bar


def test_progress_false_prints_nothing(capsys):
    simulate("fedavg", digits_federation(num_clients=2), rounds=2, progress=False)
    assert capsys.readouterr().out == ""


def test_a_slow_round_names_its_stages_fedaas_server_steps_included(capsys, monkeypatch):
    monkeypatch.setattr(progress, "HEARTBEAT_S", 0.0)  # every stage change prints
    data = islands()
    model = init_model("fedaa_cnn", data, 0, SMALL_CNN)
    simulate("fedaa", data, model, rounds=1, train=TRAIN, strategy_params=QUICK, progress=True)
    out = capsys.readouterr().out
    stages = re.findall(r"^fedaa round 1/1  (.+?)  \(\d+s in the round\)$", out, re.M)
    n = data.num_clients
    clients = [[f"{phase}: {done}/{n} clients" for done in range(n + 1)] for phase in PHASES]
    server = ["server: synthesis", "server: fine-tuning", "server: identifiers"]
    assert stages == clients[0] + server + clients[1]
    assert re.search(r"^fedaa round 1/1  acc +[\d.]+%  loss [\d.]+  sent", out, re.M)
