"""Every strategy parameter's default names its source (issue 46 §1): a paper's section, the
authors' code or a documented rule, declared beside its value rule (`ruled(..., source=...)`),
and docs/baselines.md's table of them is generated from those declarations."""

import pytest

from fedshare.config.rules import SOURCE_KINDS
from helpers import load_script

defaults_table = load_script("defaults_table")
DECLARED = defaults_table.declarations()


def test_every_strategy_declares_parameters() -> None:
    assert len(DECLARED) > 150
    assert {"fedprox", "scaffold", "fedaa", "flea", "fedpft"} <= {
        s for row in DECLARED.values() for s in row["strategies"]
    }


@pytest.mark.parametrize(
    ("owner", "param"), sorted(DECLARED), ids=[f"{o}.{p}" for o, p in sorted(DECLARED)]
)
def test_parameter_default_cites_its_source(owner: str, param: str) -> None:
    source = DECLARED[(owner, param)]["source"]
    kind, colon, text = source.partition(": ")
    assert kind in SOURCE_KINDS and colon and text.strip(), (
        f"{owner}.{param}: its ruled(...) declares no source of its default "
        f"({', '.join(k + ': …' for k in SOURCE_KINDS)}), got {source!r}"
    )


def test_changed_defaults_cite_the_paper() -> None:
    """The two defaults once chosen on test accuracy now cite their papers' reading."""
    assert DECLARED[("FedAA", "adv_loss_weight")]["default"] == 1.0
    assert DECLARED[("FedAA", "adv_loss_weight")]["source"].startswith("paper: FedAA Eq. 7")
    assert DECLARED[("FedMix", "form")]["default"] == "fedmix"
    assert DECLARED[("FedMix", "form")]["source"].startswith("paper: FedMix")


def test_docs_table_is_generated_from_the_declarations() -> None:
    page = defaults_table.DOC.read_text()
    assert defaults_table.render(page) == page, "run python scripts/defaults_table.py"
    for (_, param), row in DECLARED.items():
        assert f"`{param}`" in page and row["source"].replace("|", "\\|") in page
