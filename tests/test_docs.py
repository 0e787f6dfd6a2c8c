"""The documentation site (issue 48): the API reference covers the public names, and the
quick start notebook gives the command line's numbers on the same setting."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import fedshare

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def test_the_api_reference_documents_every_public_name():
    documented = set(re.findall(r"^::: fedshare\.(\w+)$", (DOCS / "api.md").read_text(), re.M))
    assert set(fedshare.__all__) <= documented


def test_every_notebook_is_on_the_sites_navigation():
    nav = (ROOT / "mkdocs.yml").read_text()
    notebooks = sorted(p.name for p in (DOCS / "notebooks").glob("*.py"))
    assert len(notebooks) == 5
    assert all(f"notebooks/{name}" in nav for name in notebooks)


def execute(notebook: Path, extra_cell: str, cwd: Path) -> str:
    """Run `notebook` (Jupytext) in a fresh kernel with `extra_cell` appended; its stdout."""
    jupytext = pytest.importorskip("jupytext")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    from nbformat.v4 import new_code_cell

    book = jupytext.read(notebook)
    book.cells.append(new_code_cell(extra_cell))
    nbclient.NotebookClient(
        book, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}
    ).execute()
    return "".join(o.get("text", "") for o in book.cells[-1].outputs if o.get("name") == "stdout")


def test_the_quickstart_notebook_gives_the_command_lines_numbers(tmp_path):
    printed = execute(
        DOCS / "notebooks" / "quickstart.py",
        "import json; print(json.dumps({'final': result.final_accuracy, "
        "'best': result.summary['best_accuracy'], 'loaded': loaded_accuracy}))",
        tmp_path,
    )
    notebook = json.loads(printed.strip().splitlines()[-1])
    run_dir = tmp_path / "cli"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "fedshare.run",
            "experiment=digits_quickstart",
            "progress=false",
            f"run_dir={run_dir}",
        ],
        cwd=tmp_path,
        env=env,
        check=True,
        capture_output=True,
    )
    cli = json.loads((run_dir / "summary.json").read_text())
    assert notebook["final"] == cli["final_accuracy"]
    assert notebook["best"] == cli["best_accuracy"]
    assert notebook["loaded"] == cli["final_accuracy"]
