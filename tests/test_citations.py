"""No source, config, test, script or documentation page cites a file outside the repository:
the papers' own sections, the in-repository docs/ or "fedshare's choice" instead (issue 44
item 5). The docs' generated blocks come from src/fedshare/paper/** and are scanned there."""

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
# In prose, also the specification's own words: "the spec's tables", "[REC]" (its recommended
# choice), "the implementation notes". Source files use "spec" for other things (a shift spec).
OUTSIDE_IN_PROSE = re.compile(
    "|".join(
        (OUTSIDE.pattern, r"\bthe spec\b", r"\bspec's\b", r"\[REC\]", r"implementation notes")
    ),
    re.IGNORECASE,
)
GENERATED_BLOCK = re.compile(r"<!-- reproduce:.*?<!-- /reproduce -->", re.DOTALL)


def cited_outside(text: str, pattern: re.Pattern[str] = OUTSIDE) -> list[str]:
    """The lines of `text` that cite a file outside the repository."""
    return [line.strip() for line in text.splitlines() if pattern.search(line)]


def prose(page: str) -> str:
    """A documentation page without its generated `<!-- reproduce:… -->` blocks."""
    return GENERATED_BLOCK.sub("", page)


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


@pytest.mark.parametrize(
    "line",
    [
        "Two exchanges with the same cohort (spec §2.2, Algorithm 4):",
        "### Choices the paper leaves open ([REC] unless said)",
        "the presets use the spec's CNN (`cnn_mnist`)",
        "It matches §1 of the spec; no change was needed.",
        "The section numbers below are those of the implementation notes.",
        "baselines of ReBaFL's tables (shared/specs/rebafl.md §6)",
    ],
)
def test_a_doc_line_citing_the_specification_is_found(line):
    assert cited_outside(line, OUTSIDE_IN_PROSE) == [line]


@pytest.mark.parametrize(
    "line",
    [
        "Two exchanges with the same cohort (FedAA §3, Algorithm 4):",
        "### Choices the paper leaves open (fedshare's choices unless said)",
        '(the paper gives only "top-K = half")',
        "[records](fedpft-records.md#measured-numbers-beside-the-reference-calibration)",
    ],
)
def test_a_doc_line_citing_a_paper_or_fedshare_passes(line):
    assert cited_outside(line, OUTSIDE_IN_PROSE) == []


def test_prose_leaves_out_only_the_generated_blocks():
    page = (
        "before (spec §1)\n<!-- reproduce:flea/table1 a.json -->\nthe spec's row\n"
        "<!-- /reproduce -->\nbetween\n"
        "<!-- reproduce:x b.json -->\n[REC]\n<!-- /reproduce -->\nafter"
    )
    assert prose(page).splitlines() == ["before (spec §1)", "", "between", "", "after"]


def test_no_documentation_page_cites_a_file_outside_the_repository():
    pages = sorted((ROOT / "docs").glob("*.md"))
    assert pages
    found = {
        str(page.relative_to(ROOT)): lines
        for page in pages
        if (lines := cited_outside(prose(page.read_text(encoding="utf-8")), OUTSIDE_IN_PROSE))
    }
    assert not found, found
