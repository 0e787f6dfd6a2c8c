"""No source, config, test or script cites a file outside the repository: the papers' own
sections, the in-repository docs/ or "fedshare's choice" instead (issue 44 item 5)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
AREAS = ("src", "configs", "tests", "scripts")
SUFFIXES = {".py", ".yaml", ".yml", ".json", ".toml", ".cfg"}
OUTSIDE = re.compile(
    "|".join(
        (
            r"specs/",  # the specification folder
            r"DESIGN\.md",  # the design contract
            r"\bspec §",  # "spec §7.12"
            r"(?<![\w/-])(?:flea|rebafl|fedpft|xormixfl|fedaa)\.md §",  # a spec file, not docs/
            r"§\d+(?:\.\d+)* (?:A|B|C)\d+\b",  # a spec's ambiguity or claim code: "§9 A5"
            r"§\d+(?:\.\d+)* item \d+",  # "§8 item 13"
        )
    )
)


def cited_outside(text: str) -> list[str]:
    """The lines of `text` that cite a file outside the repository."""
    return [line.strip() for line in text.splitlines() if OUTSIDE.search(line)]


def sources() -> list[Path]:
    """Every source, config, test and script file but this one (its patterns match)."""
    return sorted(
        path
        for area in AREAS
        for path in (ROOT / area).rglob("*")
        if path.suffix in SUFFIXES and path.is_file() and path != Path(__file__).resolve()
    )


@pytest.mark.parametrize(
    "line",
    [
        "# lenet_fmnist: ReBaFL's recipe (specs/rebafl.md §7.8)",
        "runs the simulation (DESIGN.md's contract).",
        "# `last10_mean_accuracy` (spec §7.12, tolerance ±3 points).",
        "# XorMixFL's MNIST CNN (xormixfl.md §7 A8)",
        "# ------------------------------------------- §9 A5: mix-up",
        "# ------------------------------------------- §8 item 13: test set",
    ],
)
def test_a_citation_of_an_outside_file_is_found(line):
    assert cited_outside(line) == [line.strip()]


@pytest.mark.parametrize(
    "line",
    [
        "# FLea's CIFAR MobileNetV2 (FLea App. C.2, Table 3)",
        "Numbers: docs/fedpft.md.",
        '"""FedPFT §4.3: DP-FedPFT releases one Gaussian per (client, class)',
        "Vanilla FL local epochs (docs/xormixfl.md)",
        'text = (root / "docs" / "xormixfl.md").read_text()',
    ],
)
def test_a_citation_of_a_paper_or_of_docs_passes(line):
    assert cited_outside(line) == []


def test_no_file_in_the_repository_cites_a_file_outside_it():
    found = {
        str(path.relative_to(ROOT)): lines
        for path in sources()
        if (lines := cited_outside(path.read_text(encoding="utf-8", errors="replace")))
    }
    assert not found, found
