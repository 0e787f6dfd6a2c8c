"""results/ and reproduce/ beyond the statistics, pinned exactly (docs/mutation.md, the
`results_*` and `reproduce_*` entries): grouping runs into rows and the notes on it, the report's
rows, the Markdown and CSV text, a paper table's cell per row, reading run folders, the run
directory's files and summary, partition labels, atomic writes, the plots' numbers, the model
file and the machine record; `reproduce`'s rendering, jobs and docs blocks. Runs are plain dicts
or folders written here: no simulation."""

import csv
import json
import math
from pathlib import Path

import pytest

from fedshare.errors import FedshareError
from fedshare.paper.compare import PaperEntry
from fedshare.results.grouping import (
    ABSENT,
    MISSING,
    Group,
    canon,
    flatten,
    group_runs,
    listed,
    notes_on,
    run_value,
    show,
    split_keys,
)
from fedshare.results.paper_match import (
    PaperCell,
    PaperTable,
    _same,
    load_paper,
    paper_cell,
)
from fedshare.results.stats import AT_BEST_VALIDATION, STATS, report_stats
from fedshare.results.table import accuracy_curves, build_report, short_labels
from fedshare.results.writers import (
    _fmt,
    markdown_table,
    pivot_table,
    table_rows,
    to_markdown,
    write_csv,
)


def run(name="fedavg", seed=0, history=(), status=None, **config):
    """A loaded run as `load_run` returns it: `config` as nested dicts (`train={"lr": 0.1}`)."""
    summary = {"strategy": name, "data": "digits", "partition": "iid", "model": "mlp"}
    summary.update(seed=seed, final_accuracy=50.0 + seed)
    if status is not None:
        summary["status"] = status
    base = {"seed": seed, "strategy": {"name": name}, "data": {"name": "digits"}}
    return {"summary": summary, "config": {**base, **config}, "history": list(history)}


# ---------------------------------------------------------------------------- grouping
def test_flatten_joins_nested_keys_and_keeps_empty_mappings_and_lists_as_values():
    nested = {"a": {}, "b": {"c": 1, "d": {"e": 2}}, "l": [1, {"x": 1}], "n": None}
    assert flatten(nested) == {"a": {}, "b.c": 1, "b.d.e": 2, "l": [1, {"x": 1}], "n": None}
    assert flatten({"k": 1}, "p.") == {"p.k": 1}


def test_run_value_reads_names_from_the_summary_else_the_config_and_flags_absent_keys():
    r = run(train={"lr": 0.1})
    assert run_value(r, "strategy") == "fedavg"
    assert run_value(r, "train.lr") == 0.1
    assert run_value(r, "train.momentum") is ABSENT
    r["summary"]["strategy"] = None
    r["config"]["strategy"] = {"name": "fedprox"}
    assert run_value(r, "strategy") == "fedprox"
    r["config"]["strategy"] = "scaffold"
    assert run_value(r, "strategy") == "scaffold"
    del r["summary"]["model"]
    r["config"]["model"] = {"width": 3}
    assert run_value(r, "model") is None


def test_canon_show_and_listed():
    assert canon(ABSENT) == "<absent>"
    assert canon({"b": 1, "a": [2]}) == '{"a": [2], "b": 1}'
    assert canon(None) == "null"
    assert show(ABSENT) == MISSING and show(None) == MISSING
    assert show("x") == "x" and show(0.5) == "0.5" and show([1, "a"]) == '[1, "a"]'
    assert show(True) == "true"
    letters = list("abcdefghij")
    assert listed(letters) == "a, b, c, d, e, f, g, h, … (2 more)"
    assert listed(letters[:8]) == "a, b, c, d, e, f, g, h"
    assert listed(letters, 2) == "a, b, … (8 more)"
    assert listed([]) == ""


def test_split_keys_are_the_keys_that_vary_within_one_setting_not_between_settings():
    runs = [
        run("fedavg", 0, train={"lr": 0.1}, device="cpu", rounds=5),
        run("fedavg", 1, train={"lr": 0.2}, device="cuda", rounds=5),
        run("fedprox", 0, train={"lr": 0.1}, rounds=7),
    ]
    # rounds differs between strategies only; device is an execution key; seed never splits
    assert split_keys(runs) == ["train.lr"]
    assert split_keys(runs[:1]) == []


def test_groups_are_method_by_setting_sorted_by_setting_then_method_and_count_their_seeds():
    runs = [
        run("fedprox", 0, train={"lr": 0.2}, strategy={"name": "fedprox", "mu": 0.1}),
        run("fedavg", 0, train={"lr": 0.2}),
        run("fedavg", 1, train={"lr": 0.2}),
        run("fedavg", 0, train={"lr": 0.1}),
        run("fedavg", 1, train={"lr": 0.1}),
    ]
    groups = group_runs(runs)
    assert [(g.method, g.setting["train.lr"], len(g.runs)) for g in groups] == [
        ("fedavg", 0.1, 2),
        ("fedavg", 0.2, 2),
        ("fedprox", 0.2, 1),
    ]
    assert groups[0].seeds == [0, 1]
    assert list(groups[0].setting) == ["data", "partition", "model", "train.lr"]
    assert groups[0].setting_label == "digits/iid/mlp train.lr=0.1"
    assert groups[0].label(["train.lr"]) == "train.lr=0.1"
    assert groups[0].label(["model", "data"]) == "digits/mlp"
    assert groups[0].label([]) == "all"


def test_grouping_by_named_keys_pools_the_rest_and_strategy_keys_join_the_method():
    runs = [
        run("fedprox", 0, strategy={"name": "fedprox", "mu": 0.5}, train={"lr": 0.1}),
        run("fedprox", 1, strategy={"name": "fedprox", "mu": 0.01}, train={"lr": 0.2}),
        run("fedavg", 0, train={"lr": 0.1}),
    ]
    groups = group_runs(runs, by=["strategy", "method", "strategy.name", "strategy.mu"])
    assert [(g.method, g.setting, len(g.runs)) for g in groups] == [
        ("fedavg", {}, 1),
        ("fedprox mu=0.01", {}, 1),
        ("fedprox mu=0.5", {}, 1),
    ]
    groups = group_runs(runs, by=["data"])
    assert [(g.method, g.setting) for g in groups] == [
        ("fedavg", {"data": "digits"}),
        ("fedprox", {"data": "digits"}),
    ]
    with pytest.raises(FedshareError, match=r"no run has a config key 'train\.wd'.*train\.lr"):
        group_runs(runs, by=["train.wd"])


def test_sort_puts_numbers_first_in_numeric_order_then_text_and_bools_as_text():
    runs = [run(seed=i, train={"lr": v}) for i, v in enumerate(["b", 10, True, 2.5, "a", None])]
    got = [g.setting["train.lr"] for g in group_runs(runs)]
    assert got == [2.5, 10, "a", "b", True, None]


def test_notes_name_pooled_and_fixed_keys_repeated_seeds_and_unfinished_runs():
    runs = [
        run("fedavg", 0, rounds=5, eval={"every": 1}),
        run("fedavg", 0, rounds=5, eval={"every": 2}, status="stopped"),
        run("fedavg", 1, rounds=5, eval={"every": 1}, status="completed"),
        run("fedprox", 0, rounds=9, eval={"every": 1}, status="failed"),
    ]
    groups = group_runs(runs, by=["data"])
    assert notes_on(groups) == [
        "pooled over different values of: eval.every",
        "fixed within each row but different between rows: rounds",
        "fedavg on digits: seed(s) 0 appear more than once",
        "fedavg on digits: 1 of 3 runs stopped",
        "fedprox on digits: 1 of 1 runs failed",
    ]
    assert notes_on(group_runs(runs[2:3])) == []
    other = run("fedavg", 0, data={"name": "cifar10"}, model={"name": "cnn"})
    other["summary"].update(data="cifar10", model="cnn")
    both = [run("fedavg", 0, model={"name": "mlp"}), other]
    assert notes_on(group_runs(both)) == []  # the names are the rows' setting, not notes
    with pytest.raises(FedshareError, match=r"no run has a config key 'data\.name'"):
        group_runs(both, by=["data.name"])


# ---------------------------------------------------------------------------- stats, table
def test_report_stats_add_test_at_best_validation_after_best_only_when_a_run_has_it():
    plain = [run()]
    assert report_stats(plain) == list(STATS)
    scored = [run(), run(seed=1)]
    scored[1]["summary"][AT_BEST_VALIDATION[0]] = 61.0
    stats = report_stats(scored)
    assert stats[: stats.index(AT_BEST_VALIDATION)] == list(STATS[:3])
    assert stats == [*STATS[:3], AT_BEST_VALIDATION, *STATS[3:]]
    scored[1]["summary"][AT_BEST_VALIDATION[0]] = float("nan")
    assert report_stats(scored) == list(STATS)


def _paper(entries, methods, columns=("p/t",), metric="final_accuracy"):
    return PaperTable("t", metric, tuple(columns), tuple(entries), methods)


def test_build_report_rows_hold_mean_and_sample_std_and_the_paper_cell_and_note():
    runs = [run("fedavg", 0), run("fedavg", 2), run("fedprox", 1)]
    entry = PaperEntry("t", "p/t", "fedavg", 49.0, 1.0)
    paper = _paper([entry], {"fedavg": ("strategy=fedavg",)})
    report = build_report(runs, paper=paper)
    assert [r.group.method for r in report.rows] == ["fedavg", "fedprox"]
    assert report.rows[0].stats["final_accuracy"] == (51.0, pytest.approx(2**0.5))
    assert report.rows[1].stats["final_accuracy"] == (51.0, None)
    assert report.rows[0].paper == PaperCell(entry, "final_accuracy", 51.0)
    assert report.rows[0].paper.delta == 2.0
    assert report.rows[1].paper is None
    assert report.setting_keys == ["data", "partition", "model"]
    assert report.notes == ["paper table t (final_accuracy): 1 of 2 rows have a cell in p/t"]
    assert build_report(runs).notes == [] and build_report(runs).rows[0].paper is None
    runs.append(run("scaffold", 0))
    columns = ("p/t", "p/t a=1", "p/t b=1", "p/t c=1", "p/t d=1")
    report = build_report(runs, paper=_paper([entry], paper.methods, columns))
    assert report.notes == [
        "paper table t (final_accuracy): 1 of 3 rows have a cell in p/t, p/t a=1, p/t b=1, "
        "… (2 more)"
    ]


def test_short_labels_and_curves_name_only_the_keys_that_differ_between_rows():
    history = [{"round": 1, "accuracy": 10.0}, {"round": 2.0, "accuracy": None}]
    history += [{"round": None, "accuracy": 5.0}, {"round": 3, "accuracy": 30}]
    runs = [run(seed=0, train={"lr": 0.1}, history=history), run(seed=1, train={"lr": 0.2})]
    report = build_report(runs)
    assert short_labels(report) == ["train.lr=0.1", "train.lr=0.2"]
    assert accuracy_curves(report) == {
        "fedavg · train.lr=0.1": [(1, 10.0), (3, 30)],
        "fedavg · train.lr=0.2": [],
    }
    same = build_report([run(seed=0, history=history), run(seed=1, history=history)])
    assert short_labels(same) == [""]
    assert accuracy_curves(same) == {"fedavg": [(1, 10.0), (3, 30)] * 2}


# ---------------------------------------------------------------------------- writers
def test_fmt_scales_rounds_and_drops_a_zero_spread_only_of_counts():
    assert _fmt(None, 1.0) == MISSING
    assert _fmt(12.345, None) == "12.35"
    assert _fmt(12.345, 0.5) == "12.35 ± 0.50"
    assert _fmt(2e6, 1e6, scale=1e6) == "2.00 ± 1.00"
    assert _fmt(5.0, 0.0, digits=0) == "5"
    assert _fmt(5.0, 0.0, digits=1) == "5.0 ± 0.0"
    assert _fmt(5.0, 1.0, digits=0) == "5 ± 1"


def _two_row_report(paper=None):
    def one(strategy, seed, final, history_len):
        r = run(strategy, seed, history=[{"round": k} for k in range(history_len)])
        r["summary"].update(
            final_accuracy=final,
            rounds_completed=3,
            bytes_up=2e6,
            bytes_down=1e6,
            wall_time_s=1.25,
        )
        return r

    runs = [one("fedavg", 0, 70.0, 3), one("fedavg", 1, 80.0, 4), one("fedprox", 0, 60.0, 2)]
    return build_report(runs, paper=paper)


def test_table_rows_show_every_statistic_in_its_units_and_the_last_k_header():
    headers, cells = table_rows(_two_row_report())
    assert headers == [
        "method",
        "data",
        "partition",
        "model",
        "seeds",
        "rounds",
        "final %",
        "best %",
        "last-4 %",
        "MB up+down",
        "MB shared",
        "time s",
    ]
    assert cells[0] == [
        "fedavg",
        "digits",
        "iid",
        "mlp",
        "2",
        "3",
        "75.00 ± 7.07",
        MISSING,
        MISSING,
        "3.00 ± 0.00",
        MISSING,
        "1.2 ± 0.0",
    ]
    assert cells[1][:7] == ["fedprox", "digits", "iid", "mlp", "1", "3", "60.00"]


def test_table_rows_with_a_paper_table_add_its_number_and_the_signed_delta():
    entry = PaperEntry("t", "p/t", "fedavg", 72.5, 1.5)
    report = _two_row_report(_paper([entry], {"fedavg": ("strategy=fedavg",)}))
    headers, cells = table_rows(report)
    assert headers[-2:] == ["paper final_accuracy", "Δ"]
    assert cells[0][-2:] == ["72.50 ± 1.50", "+2.50"]
    assert cells[1][-2:] == [MISSING, MISSING]
    report.rows[0].paper = PaperCell(entry, "final_accuracy", None)
    assert table_rows(report)[1][0][-2:] == ["72.50 ± 1.50", MISSING]
    report.rows[0].paper = PaperCell(entry, "final_accuracy", 70.0)
    assert table_rows(report)[1][0][-1] == "-2.50"


def test_markdown_table_pads_each_column_to_its_widest_cell():
    text = markdown_table(["a", "bbb"], [["xx", "y"], ["z", ""]])
    assert text.splitlines() == [
        "| a  | bbb |",
        "|----|-----|",
        "| xx | y   |",
        "| z  |     |",
    ]
    with pytest.raises(ValueError):  # a row with more cells than headers is refused, not cut
        markdown_table(["a"], [["x", "y"]])


def test_pivot_table_is_methods_by_settings_with_empty_cells_missing():
    runs = [
        run("fedavg", 0, train={"lr": 0.1}),
        run("fedavg", 1, train={"lr": 0.1}),
        run("fedavg", 0, train={"lr": 0.2}),
        run("fedprox", 0, train={"lr": 0.2}),
        run("fedprox", 0, train={"lr": 0.3}),
    ]
    headers, cells = pivot_table(build_report(runs))
    assert headers == ["method", "train.lr=0.1", "train.lr=0.2", "train.lr=0.3"]
    assert cells == [
        ["fedavg", "50.50 ± 0.71", "50.00", MISSING],
        ["fedprox", MISSING, "50.00", "50.00"],
    ]
    assert pivot_table(build_report(runs), "rounds_completed")[1][0][1] == MISSING


def test_to_markdown_counts_runs_and_rows_and_adds_the_pivot_only_for_several_settings():
    one = to_markdown(build_report([run()]))
    assert "1 run in 1 row; mean ± sample std" in one
    assert "## Final accuracy" not in one and "## Notes" not in one
    assert one.endswith("![accuracy per round, mean ± std over seeds](curves.png)\n")
    runs = [
        run("fedavg", 0, train={"lr": 0.1}),
        run("fedavg", 0, train={"lr": 0.2}, status="stopped"),
    ]
    two = to_markdown(build_report(runs))
    assert "2 runs in 2 rows;" in two
    assert "## Final accuracy (%), method × setting" in two
    assert "## Notes\n\n- fedavg on digits/iid/mlp train.lr=0.2: 1 of 1 runs stopped\n" in two


def test_write_csv_holds_raw_units_seeds_and_the_papers_cell(tmp_path):
    entry = PaperEntry("t", "p/t", "fedavg", 72.5, 1.5)
    report = _two_row_report(_paper([entry], {"fedavg": ("strategy=fedavg",)}))
    report.rows[1].group.setting["model"] = {"w": [1]}
    write_csv(report, tmp_path / "r.csv")
    rows = list(csv.DictReader((tmp_path / "r.csv").open()))
    assert rows[0]["seeds"] == "0;1" and rows[0]["n"] == "2"
    assert rows[0]["bytes_up_down_mean"] == "3000000.0" and rows[0]["bytes_up_down_std"] == "0.0"
    assert rows[0]["best_accuracy_mean"] == "" and rows[1]["final_accuracy_std"] == ""
    assert rows[1]["model"] == '{"w": [1]}'
    assert [rows[0][k] for k in ("paper_table", "paper_column", "paper_method")] == [
        "t",
        "p/t",
        "fedavg",
    ]
    assert [rows[0][k] for k in ("paper_mean", "paper_std", "measured_mean", "delta")] == [
        "72.5",
        "1.5",
        "75.0",
        "2.5",
    ]
    assert all(rows[1][k] == "" for k in ("paper_table", "paper_mean", "delta"))
    write_csv(_two_row_report(), tmp_path / "plain.csv")
    assert "paper_table" not in (tmp_path / "plain.csv").read_text()


# ---------------------------------------------------------------------------- paper_match
def _table_file(tmp_path, entries, methods=None, metric="best_accuracy"):
    raw = {"metric": metric, "entries": entries}
    if methods is not None:
        raw["methods"] = methods
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(raw))
    return str(path)


def _entry(preset, method, mean=50.0):
    return {"preset": preset, "method": method, "mean": mean, "std": 1.0}


def test_load_paper_reads_a_json_file_and_picks_columns_exactly_else_by_part(tmp_path):
    path = _table_file(
        tmp_path,
        [
            _entry("p/a", "fedavg"),
            _entry("p/a x=1", "fedavg"),
            _entry("p/a x=10", "fedavg"),
            _entry("p/a x=1", "ours"),
        ],
        {"ours": {"overrides": ["strategy=fedavg", "strategy.k=2"]}, "gone": {"overrides": []}},
    )
    table = load_paper(path, "p/a x=1")
    assert table.name == "mine" and table.metric == "best_accuracy"
    assert table.columns == ("p/a x=1",)
    assert [(e.preset, e.method) for e in table.entries] == [
        ("p/a x=1", "fedavg"),
        ("p/a x=1", "ours"),
    ]
    assert table.methods == {
        "fedavg": ("strategy=fedavg",),
        "ours": ("strategy=fedavg", "strategy.k=2"),
    }
    assert load_paper(path, "x=1").columns == ("p/a x=1", "p/a x=10")
    assert load_paper(path).columns == ("p/a", "p/a x=1", "p/a x=10")
    with pytest.raises(
        FedshareError, match=r"paper table 'mine' has no column 'y=2'; columns: p/a"
    ):
        load_paper(path, "y=2")


def test_load_paper_refuses_several_presets_a_bad_file_and_an_unknown_name(tmp_path):
    path = _table_file(tmp_path, [_entry("p/a", "m"), _entry("p/b", "m")])
    with pytest.raises(FedshareError, match=r"several columns; name one .*: p/a, p/b"):
        load_paper(path)
    assert load_paper(path, "p/b").columns == ("p/b",)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"entries": [{"preset": "p/a"}]}))
    with pytest.raises(FedshareError, match="is not a paper table"):
        load_paper(str(bad))
    bad.write_text(json.dumps({"rows": []}))
    with pytest.raises(FedshareError, match="is not a paper table"):
        load_paper(str(bad))
    with pytest.raises(FedshareError, match=r"no paper table 'nope'; give a JSON file or one of"):
        load_paper("nope")
    assert load_paper("flea.json", "cifar10_dir0.1_n100").name == "flea"
    assert load_paper(path, "p/a").metric == "best_accuracy"


def test_same_compares_numbers_closely_lists_elementwise_and_the_rest_exactly():
    assert _same(0.1, 0.1 + 1e-12) and not _same(0.1, 0.1001)
    assert _same(0, 1e-13) and not _same(0, 1e-11)
    assert _same([1, [2.0, "a"]], (1.0, [2, "a"]))
    assert not _same([1, 2], [1, 2, 3]) and not _same([1, 2], [1, 3])
    assert _same("a", "a") and not _same("a", "b")


def _group(strategy="fedavg", **config):
    r = run(strategy, **config)
    return Group(strategy, strategy, {}, [r])


def test_paper_cell_needs_one_fitting_column_and_the_most_specific_method():
    entries = [
        PaperEntry("t", "p/t x.k=1", "fedavg", 1.0, 0.0),
        PaperEntry("t", "p/t x.k=1", "tuned", 2.0, 0.0),
        PaperEntry("t", "p/t x.k=1", "off", 3.0, 0.0),
        PaperEntry("t", "p/t x.k=2", "fedavg", 4.0, 0.0),
    ]
    methods = {
        "fedavg": ("strategy=fedavg",),
        "tuned": ("strategy=fedavg", "train.lr=0.5"),
        "off": ("strategy=fedavg", "train.lr=[1, 2]"),
    }
    paper = _paper(entries, methods, columns=("p/t x.k=1", "p/t x.k=2"))
    assert paper_cell(_group(x={"k": 1}), paper) == entries[0]
    assert paper_cell(_group(x={"k": 1}, train={"lr": 0.5}), paper) == entries[1]
    assert paper_cell(_group(x={"k": 1}, train={"lr": [1, 2]}), paper) == entries[2]
    assert paper_cell(_group(x={"k": 2}), paper) == entries[3]
    assert paper_cell(_group(x={"k": 3}), paper) is None
    assert paper_cell(_group(), paper) is None  # x.k absent: no column fits
    assert paper_cell(_group("fedprox", x={"k": 1}), paper) is None
    both = _paper(entries, methods, columns=("p/t", "p/t x.k=1"))
    assert paper_cell(_group(x={"k": 1}), both) is None  # two columns fit
    tie = {**methods, "off": ("strategy=fedavg", "x.k=1")}
    assert (
        paper_cell(_group(x={"k": 1}, train={"lr": 0.5}), _paper(entries, tie, ("p/t x.k=1",)))
        is None
    )
    unrun = {"tuned": methods["tuned"]}
    assert paper_cell(_group(x={"k": 1}), _paper(entries, unrun, ("p/t x.k=1",))) is None


def test_paper_cell_reads_every_run_of_the_group_and_parses_override_values():
    entries = [PaperEntry("t", "p/t", "fedavg", 1.0, 0.0)]
    paper = _paper(entries, {"fedavg": ("strategy=fedavg", "train.name=[x")})
    group = _group(train={"name": "[x"})
    assert paper_cell(group, paper) == entries[0]  # not YAML: compared as text
    group.runs.append(run(train={"name": "other"}))
    assert paper_cell(group, paper) is None


# ---------------------------------------------------------------------------- runs
def _folder(path: Path, summary=None, config=None, metrics=None) -> Path:
    path.mkdir(parents=True)
    (path / "summary.json").write_text(json.dumps(summary if summary is not None else {"a": 1}))
    if config is not None:
        (path / "config.yaml").write_text(config)
    if metrics is not None:
        (path / "metrics.jsonl").write_text(metrics)
    return path


def test_find_runs_takes_folders_summaries_and_trees_once_each_in_order(tmp_path):
    from fedshare.results.runs import find_runs

    b = _folder(tmp_path / "tree" / "b")
    a = _folder(tmp_path / "tree" / "a" / "deep")
    assert find_runs([tmp_path / "tree"]) == [a, b]
    assert find_runs([b, b / "summary.json", tmp_path / "tree"]) == [b, a]
    (tmp_path / "note.txt").write_text("x")
    with pytest.raises(FedshareError, match=r"'.*note\.txt' is a file, not a run directory"):
        find_runs([tmp_path / "note.txt"])
    with pytest.raises(FedshareError, match=r"no such run directory or folder: '.*gone'"):
        find_runs([tmp_path / "gone"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(FedshareError, match=r"no runs under '.*empty': it holds no summary\.json"):
        find_runs([tmp_path / "empty"])


def test_load_run_reads_the_three_files_skips_cut_lines_and_names_bad_files(tmp_path):
    from fedshare.results.runs import load_run

    metrics = '{"round": 1}\n{"round": 2, "acc\n[1, 2]\n\n{"round": 3}\n'
    path = _folder(tmp_path / "r", {"seed": 3}, "train:\n  lr: 0.1\n", metrics)
    loaded = load_run(path)
    assert loaded == {
        "path": path,
        "summary": {"seed": 3},
        "config": {"train": {"lr": 0.1}},
        "history": [{"round": 1}, {"round": 3}],
    }
    bare = _folder(tmp_path / "bare")
    assert load_run(bare)["config"] == {} and load_run(bare)["history"] == []
    (bare / "config.yaml").write_text("a: ${b}\nb: 1\n")
    assert load_run(bare)["config"] == {"a": "${b}", "b": 1}  # as recorded, not resolved
    (bare / "config.yaml").write_text("- a list\n")
    assert load_run(bare)["config"] == {}
    (bare / "config.yaml").write_text("a: [1\n")
    with pytest.raises(FedshareError, match=r"cannot read .*config\.yaml"):
        load_run(bare)
    listed_summary = _folder(tmp_path / "list", [1])
    with pytest.raises(FedshareError, match=r"summary\.json is not a JSON object"):
        load_run(listed_summary)
    (listed_summary / "summary.json").write_text("{")
    with pytest.raises(FedshareError, match=r"cannot read .*summary\.json"):
        load_run(listed_summary)


# ---------------------------------------------------------------------------- rundir
def test_write_json_replaces_non_finite_floats_at_any_depth(tmp_path):
    from fedshare.results.rundir import write_json

    write_json(tmp_path / "s.json", {"a": float("nan"), "b": [1.5, float("inf"), (2, -math.inf)]})
    text = (tmp_path / "s.json").read_text()
    assert json.loads(text) == {"a": None, "b": [1.5, None, [2, None]]}
    assert text.endswith("}\n") and '\n  "a": null' in text


def test_run_directory_writes_appends_and_rewrites_its_files(tmp_path):
    from fedshare.results.rundir import RunDirectory, read_metrics

    rd = RunDirectory(tmp_path)
    assert rd.run_files() == []
    rd.append_metrics({"round": 1, "loss": float("nan")})
    rd.append_metrics({"round": 2})
    assert read_metrics(rd.metrics_path) == [{"round": 1, "loss": None}, {"round": 2}]
    rd.rewrite_metrics([{"round": 1, "accuracy": float("inf")}])
    assert read_metrics(rd.metrics_path) == [{"round": 1, "accuracy": None}]
    rd.write_summary({"x": 1})
    rd.write_config({"train": {"lr": 0.5}})
    assert (tmp_path / "config.yaml").read_text() == "train:\n  lr: 0.5\n"
    assert rd.run_files() == ["config.yaml", "metrics.jsonl", "summary.json"]
    assert rd.checkpoint_path == tmp_path / "checkpoint.pt"
    assert not rd.partition_written("f1")
    rd.write_partition({"fingerprint": "f1"})
    assert rd.partition_written("f1") and not rd.partition_written("f2")
    (tmp_path / "partition.json").write_text('["f1"]')
    assert not rd.partition_written("f1")
    (tmp_path / "partition.json").write_text('{"fingerprint": "f1"')
    assert not rd.partition_written("f1")


def test_clear_deletes_a_runs_files_only_where_the_marker_is(tmp_path):
    from fedshare.results.rundir import RunDirectory

    rd = RunDirectory(tmp_path)
    for name in ("summary.json", "curves.png", "mine.txt"):
        (tmp_path / name).write_text("x")
    with pytest.raises(FedshareError, match=r"curves\.png, mine\.txt, summary\.json; no "):
        rd.clear()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curves.png", "mine.txt", "summary.json"]
    rd.mark()
    rd.clear()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".fedshare-run", "mine.txt"]
    RunDirectory(tmp_path / "new").clear()  # nothing there: nothing refused


def test_a_second_lock_on_a_run_folder_is_refused_and_released_after(tmp_path):
    from fedshare.results.rundir import RunDirectory

    rd = RunDirectory(tmp_path / "run")
    with rd.locked():
        assert (tmp_path / "run" / ".lock").exists()
        second = RunDirectory(tmp_path / "run").locked()
        with pytest.raises(FedshareError, match="another fedshare process is writing to"):
            second.__enter__()
    with RunDirectory(tmp_path / "run").locked():
        pass
    with RunDirectory(tmp_path / "new" / "deep").locked():  # the folders are made
        assert (tmp_path / "new" / "deep" / ".lock").is_file()
    (tmp_path / "file").write_text("x")
    under_a_file = RunDirectory(tmp_path / "file" / "run").locked()
    with pytest.raises(
        FedshareError, match=r"cannot write in run_dir .*file.* \(Not a directory\); "
    ):
        under_a_file.__enter__()


def test_check_overwrite_shows_three_foreign_entries_and_how_many_more(tmp_path):
    from fedshare.results.rundir import check_overwrite, foreign_entries

    assert foreign_entries(tmp_path / "gone") == []
    (tmp_path / ".lock").write_text("")
    assert foreign_entries(tmp_path) == []
    check_overwrite(tmp_path)
    for name in "edcba":
        (tmp_path / name).write_text("")
    assert foreign_entries(tmp_path) == list("abcde")
    with pytest.raises(FedshareError, match=r"\(a, b, c and 2 more; no \.fedshare-run marker\)"):
        check_overwrite(tmp_path)
    (tmp_path / "e").unlink()
    with pytest.raises(FedshareError, match=r"\(a, b, c and 1 more; no \.fedshare-run"):
        check_overwrite(tmp_path)
    (tmp_path / "d").unlink()
    with pytest.raises(FedshareError, match=r"\(a, b, c; no \.fedshare-run"):
        check_overwrite(tmp_path)
    (tmp_path / ".fedshare-run").write_text("")
    assert foreign_entries(tmp_path) == []


def test_check_run_folder_refuses_files_and_unwritable_places_and_leaves_nothing(tmp_path):
    from fedshare.results.rundir import check_run_folder

    (tmp_path / "f").write_text("")
    with pytest.raises(FedshareError, match=r"run_dir=.*f is a file, not a folder"):
        check_run_folder(tmp_path / "f", overwrite=False)
    with pytest.raises(FedshareError, match=r"is under .*f, which is a file, not a folder"):
        check_run_folder(tmp_path / "f" / "a" / "b", overwrite=False)
    check_run_folder(tmp_path / "new" / "run", overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "mine.txt").write_text("")
    check_run_folder(tmp_path / "used", overwrite=False)
    with pytest.raises(FedshareError, match="overwrite=true but run_dir"):
        check_run_folder(tmp_path / "used", overwrite=True)


def test_check_can_create_tries_a_folder_in_the_nearest_existing_ancestor(tmp_path, monkeypatch):
    import errno

    from fedshare.results import rundir

    tried = []

    def refuse(dir, prefix):
        tried.append((Path(dir), prefix))
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(rundir.tempfile, "mkdtemp", refuse)
    (tmp_path / "ro").mkdir()
    with pytest.raises(FedshareError, match=r"run_dir=.*ro cannot be written: .*\(Read-only"):
        rundir.check_can_create(tmp_path / "ro")
    with pytest.raises(FedshareError, match=r"run_dir=.*ro.x.y cannot be created: .*ro refuses"):
        rundir.check_can_create(tmp_path / "ro" / "x" / "y")
    assert tried == [(tmp_path / "ro", ".fedshare-")] * 2


def test_summarize_takes_final_best_and_last_k_means_over_evaluated_rounds():
    from fedshare.results.rundir import summarize

    history = [{"round": r, "accuracy": float(r), "loss": 1.0 / r} for r in range(1, 13)]
    history.insert(3, {"round": 3.5, "accuracy": None, "loss": 9.0})
    summary = summarize(history, seed=4)
    assert summary == {
        "seed": 4,
        "final_accuracy": 12.0,
        "best_accuracy": 12.0,
        "last10_mean_accuracy": 7.5,
        "last5_mean_accuracy": 10.0,
        "final_loss": 1.0 / 12,
    }
    short = summarize([{"accuracy": 4.0}, {"accuracy": 2.0, "loss": 3.0}])
    assert short["best_accuracy"] == 4.0 and short["final_accuracy"] == 2.0
    assert short["last10_mean_accuracy"] == 3.0 == short["last5_mean_accuracy"]
    assert short["final_loss"] == 3.0
    assert summarize([]) == {
        "final_accuracy": None,
        "best_accuracy": None,
        "last10_mean_accuracy": None,
        "last5_mean_accuracy": None,
        "final_loss": None,
    }


def test_validation_summary_takes_the_first_round_of_the_best_validation():
    from fedshare.results.rundir import summarize, validation_summary

    history = [
        {"round": 1, "accuracy": 10.0, "val_accuracy": 0.3},
        {"round": 2, "accuracy": 20.0, "val_accuracy": 0.5},
        {"round": 3, "accuracy": 30.0},
        {"round": 4, "accuracy": 40.0, "val_accuracy": 0.5},
        {"round": 5, "val_accuracy": 0.4},
    ]
    expected = {
        "best_val_accuracy": 0.5,
        "best_val_round": 2,
        "test_at_best_val_accuracy": 20.0,
        "final_val_accuracy": 0.4,
    }
    assert validation_summary(history) == expected
    assert summarize(history)["test_at_best_val_accuracy"] == 20.0
    assert validation_summary(history[2:3]) == {}
    assert validation_summary([{"round": 1, "val_accuracy": 0.0}])["best_val_round"] == 1


# ---------------------------------------------------------------------------- labels
def test_partition_labels_append_only_changed_parameters_set_on_the_command_line():
    from fedshare.results.labels import partition_label, set_keys, shown, with_validation

    assert shown(True) == "true" and shown(None) == "null" and shown(0.5) == "0.5"
    assert shown([1, (2, 3)]) == "1-2-3" and shown({"a": [1, 2], "b": False}) == "a-1-2-b-false"
    overrides = ["partition.alpha=0.05", "++partition.k=2", "+partition.a.b=1", "train.lr=1"]
    assert set_keys(overrides) == ["alpha", "k"]
    assert set_keys(["train.lr=1", "partition=iid"], "train") == ["lr"]
    values = {"alpha": 0.05, "k": 2, "labels": [0, 1], "seed": None}
    preset = {"alpha": 0.1, "k": 2, "seed": None}
    assert partition_label("dir0.1", values, preset, overrides) == "dir0.1+alpha0.05"
    more = ["partition.labels=[0,1]", "partition.seed=null", "partition.gone=1"]
    more += ["partition.alpha=0.05", "partition.alpha=0.05"]
    assert partition_label("dir0.1", values, preset, more) == "dir0.1+labels0-1+alpha0.05"
    assert partition_label("x", {"name": "a b=c"}, {}, ["partition.name=z"]) == "x+namea-b-c"
    assert with_validation("iid", 0.1) == "iid+val0.1"
    assert with_validation("iid", 0) == "iid" and with_validation("iid", None) == "iid"


# ---------------------------------------------------------------------------- atomic
def test_atomic_write_keeps_the_old_file_on_failure_and_removes_its_temporary(tmp_path):
    from fedshare.results.atomic import atomic_write, temp_path

    target = tmp_path / "curves.png"
    assert temp_path(target) == tmp_path / "curves.tmp.png"
    assert temp_path(tmp_path / "x") == tmp_path / "x.tmp"
    target.write_text("old")

    def fail(tmp):
        tmp.write_text("half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, fail)
    assert target.read_text() == "old" and sorted(tmp_path.iterdir()) == [target]
    atomic_write(target, lambda tmp: tmp.write_text("new"))
    assert target.read_text() == "new" and sorted(tmp_path.iterdir()) == [target]


def test_clean_temporaries_removes_only_a_writers_leftovers(tmp_path):
    from fedshare.results.atomic import clean_temporaries

    for name in ("a.tmp", "b.tmp.png", "c.tmpx", "tmp", "d.json", "e.tmp.json"):
        (tmp_path / name).write_text("")
    (tmp_path / "f.tmp").mkdir()
    assert sorted(clean_temporaries(tmp_path)) == ["a.tmp", "b.tmp.png", "e.tmp.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.tmpx", "d.json", "f.tmp", "tmp"]


def test_png_complete_needs_the_signature_and_the_iend_chunk(tmp_path):
    from fedshare.results.atomic import PNG_END, png_complete

    head = b"\x89PNG\r\n\x1a\n"
    path = tmp_path / "a.png"
    path.write_bytes(head + b"body" + PNG_END)
    assert png_complete(path)
    path.write_bytes(head + PNG_END)
    assert png_complete(path)
    path.write_bytes(head + b"body" + PNG_END[:-1])
    assert not png_complete(path)
    path.write_bytes(b"GIF89a\r\n" + PNG_END)
    assert not png_complete(path)
    path.write_bytes(PNG_END[1:])
    assert not png_complete(path)
    assert not png_complete(tmp_path / "gone.png")


# ---------------------------------------------------------------------------- plots' numbers
def test_series_and_traffic_keep_finite_values_with_their_rounds_or_positions():
    from fedshare.results.plots import _series, _traffic

    history = [
        {"round": 3, "accuracy": 1.0, "bytes_up": 1e6, "bytes_shared": 5e5},
        {"accuracy": float("nan"), "bytes_down": 2e6},
        {"round": True, "accuracy": 2, "bytes_up": 1e6, "bytes_down": 1e6},
        {"round": "x", "accuracy": "3"},
        {"round": 9.0, "accuracy": 4.0},
    ]
    assert _series(history, "accuracy") == ([3, 3, 9], [1.0, 2.0, 4.0])
    assert _traffic(history) == ([3, 2, 3], [1.0, 2.0, 2.0], [0.5, 0.0, 0.0])
    assert _series([], "loss") == ([], []) and _traffic([]) == ([], [], [])


def test_mean_curve_is_the_mean_and_sample_std_per_round():
    from fedshare.results.plots import mean_curve

    points = [(2, 1.0), (1, 4.0), (2, 3.0), (2.0, 5.0), (3, None), (3, float("nan")), (4, 7)]
    rounds, means, stds = mean_curve(points)
    assert rounds == [1, 2, 4]
    assert means == [4.0, 3.0, 7.0]
    assert stds == [0.0, 2.0, 0.0]
    assert mean_curve([(1, 1.0), (1, 2.0)])[2] == [pytest.approx(0.5**0.5)]
    assert mean_curve([]) == ([], [], [])


def test_single_round_lines_state_the_rounds_numbers():
    from fedshare.results.plots import single_round_lines

    record = {"round": 1, "accuracy": 81.234, "loss": 0.56789, "bytes_up": 1.5e6}
    record.update(bytes_down=0.5e6, bytes_shared=0.25e6)
    assert single_round_lines(record) == [
        "round 1 (the only evaluated round)",
        "test accuracy 81.23 %",
        "test loss 0.5679",
        "sent 2.00 MB up+down",
        "of which shared (not weights) 0.25 MB",
    ]
    assert single_round_lines({"bytes_down": 1e6, "bytes_shared": 0, "loss": None}) == [
        "round 1 (the only evaluated round)",
        "sent 1.00 MB up+down",
    ]
    assert single_round_lines({"round": 7, "accuracy": float("nan")}) == [
        "round 7 (the only evaluated round)"
    ]
    # a missing direction adds nothing: 5000 bytes are 0.005 MB, shown 0.01; 4999 show 0.00
    assert single_round_lines({"bytes_up": 4999})[1] == "sent 0.00 MB up+down"
    assert single_round_lines({"bytes_down": 4999})[1] == "sent 0.00 MB up+down"
    assert single_round_lines({"bytes_up": 5000})[1] == "sent 0.01 MB up+down"
    # MB are 10^6 bytes: 100,004,950 bytes are 100.00 MB (100.01 per 999,999 bytes)
    assert single_round_lines({"bytes_up": 100_004_950, "bytes_shared": 100_004_950})[1:] == [
        "sent 100.00 MB up+down",
        "of which shared (not weights) 100.00 MB",
    ]
    assert single_round_lines({"bytes_down": 5000, "bytes_shared": 5000})[1:] == [
        "sent 0.01 MB up+down",
        "of which shared (not weights) 0.01 MB",
    ]


# ---------------------------------------------------------------------------- model file, machine
def test_model_file_round_trips_the_model_its_options_and_input_preparation(tmp_path):
    from types import SimpleNamespace

    import torch

    from fedshare.models.base import build_model
    from fedshare.results.model_file import load_model, save_model

    torch.manual_seed(0)
    model = build_model("mlp", (3, 2, 2), 4, {"hidden": [5]})
    dataset = SimpleNamespace(
        input_shape=(3, 2, 2), num_classes=4, scale=0.5, mean=(1.0, 2.0, 3.0), std=(2.0, 4.0, 8.0)
    )
    save_model(
        tmp_path / "model.pt", model, "mlp", {"hidden": [5]}, SimpleNamespace(dataset=dataset)
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt"]
    state = torch.load(tmp_path / "model.pt", weights_only=True)
    assert state["input"] == {"scale": 0.5, "mean": [1.0, 2.0, 3.0], "std": [2.0, 4.0, 8.0]}
    assert state["input_shape"] == [3, 2, 2] and state["num_classes"] == 4
    loaded = load_model(tmp_path)
    assert not loaded.training and not loaded.network.training
    x = torch.arange(24.0).view(2, 3, 2, 2)
    prepared = (x * 0.5 - torch.tensor([1.0, 2.0, 3.0]).view(1, 3, 1, 1)) / torch.tensor(
        [2.0, 4.0, 8.0]
    ).view(1, 3, 1, 1)
    assert torch.equal(loaded.prepare(x), prepared)
    with torch.no_grad():
        assert torch.equal(loaded(x), model(prepared))
    plain = SimpleNamespace(input_shape=(3, 2, 2), num_classes=4, scale=1.0, mean=None, std=None)
    save_model(tmp_path / "model.pt", model, "mlp", None, SimpleNamespace(dataset=plain))
    assert torch.load(tmp_path / "model.pt", weights_only=True)["params"] == {}
    with pytest.raises(RuntimeError):  # the default hidden sizes do not fit the weights
        load_model(tmp_path)


def test_raw_input_model_scales_only_when_asked_and_normalises_only_with_mean_and_std():
    import torch

    from fedshare.results.model_file import RawInputModel

    x = torch.tensor([[2, 4], [6, 8]], dtype=torch.uint8)
    assert torch.equal(RawInputModel(torch.nn.Identity(), 1.0, None, None)(x), x.float())
    assert torch.equal(RawInputModel(torch.nn.Identity(), 0.5, [1.0], None)(x), x.float() / 2)
    for scale in (2.0, 0.0):  # every scale but 1 multiplies
        assert torch.equal(RawInputModel(torch.nn.Identity(), scale, None, None)(x), x * scale)
    half = RawInputModel(torch.nn.Identity(), 0.5, [1.0, 2.0], [1.0, 4.0])
    assert torch.equal(half(x), torch.tensor([[0.0, 0.0], [2.0, 0.5]]))


class Opaque:
    """An object a model file never holds (pickled by reference to this module)."""


def test_load_model_names_a_missing_file_an_unknown_model_and_an_old_file(tmp_path):
    import pickle

    import torch

    from fedshare.results.model_file import load_model

    with pytest.raises(FedshareError, match=r"model\.pt does not exist; is .* a finished run"):
        load_model(tmp_path)
    torch.save({"model": "nope", "state_dict": {}, "extra": Opaque()}, tmp_path / "model.pt")
    with pytest.raises(pickle.UnpicklingError):  # read weights-only: no object is rebuilt
        load_model(tmp_path)
    torch.save({"model": "nope", "state_dict": {}}, tmp_path / "model.pt")
    with pytest.raises(FedshareError, match="holds a 'nope', which is not a registered model"):
        load_model(tmp_path)
    torch.save({"model": "mlp", "state_dict": {}}, tmp_path / "model.pt")
    with pytest.raises(FedshareError, match="written before model files recorded their input"):
        load_model(tmp_path)


def test_machine_reads_the_cpu_model_line_and_the_build_versions(monkeypatch):
    import platform

    import torch

    from fedshare.results import machine as module

    class FakePath:
        text = "processor\t: 0\nmodel name\t: Chip: X 9\nmodel name\t: Other\n"

        def __init__(self, _):
            pass

        def read_text(self):
            if self.text is None:
                raise OSError
            return self.text

    monkeypatch.setattr(module, "Path", FakePath)
    assert module.cpu_model() == "Chip: X 9"
    FakePath.text = "processor\t: 0\n"
    assert module.cpu_model() == (platform.processor() or platform.machine())
    FakePath.text = None
    assert module.cpu_model() == (platform.processor() or platform.machine())
    build = "  - Math Kernel Library Version 2020.0.4\n  - MKL-DNN v3.1.4 (Git)\n"
    monkeypatch.setattr(torch.__config__, "show", lambda: build)
    assert module.build_version(r"MKL-DNN (v[\w.]+)") == "v3.1.4"
    assert module.build_version(r"Math Kernel Library Version ([\d.]+)") == "2020.0.4"
    assert module.build_version(r"CUDA ([\d.]+)") is None
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: True)
    monkeypatch.setattr(torch.backends.mkl, "is_available", lambda: False)
    found = module.machine()
    assert found["onednn"] == "v3.1.4" and found["mkl"] is None
    assert found["threads"] == torch.get_num_threads() and "gpu" not in found
    assert found["torch"] == torch.__version__
    assert found["os"] == f"{platform.system()} {platform.release()}"
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mkl, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: f"GPU of {device}")
    found = module.machine("cuda:1")
    assert found["onednn"] is None and found["mkl"] == "2020.0.4"
    assert found["gpu"] == "GPU of cuda:1" and found["cuda"] == torch.version.cuda


def row_cells(text: str, first: str) -> list[str]:
    """The cells of the one Markdown table row of `text` whose first cell is `first`."""
    (line,) = [ln for ln in text.splitlines() if ln.startswith(f"| {first} ")]
    return [cell.strip() for cell in line.split("|")[1:-1]]


# ---------------------------------------------------------------------------- reproduce/jobs
def _job_files(tmp_path: Path, job: dict, methods: dict | None = None) -> str:
    """A job YAML beside its paper table `t.json` (two columns, fedavg and fedprox; FedProx's
    name as printed, and `gone`, a row the library does not run); the job file's path."""
    table = {
        "table": "Table 9",
        "metric": "best_accuracy",
        "entries": [
            {"preset": "p/a", "method": "fedavg", "mean": 60.0, "std": 1.0},
            {"preset": "p/a", "method": "fedprox", "mean": 62.0, "std": 2.0},
            {"preset": "p/a", "method": "gone", "mean": 1.0, "std": 0.0},
            {"preset": "p/a k=1", "method": "fedavg", "mean": 70.0, "std": 1.0},
        ],
        "methods": methods or {"fedprox": "FedProx (ours)", "gone": {"overrides": None}},
    }
    (tmp_path / "t.json").write_text(json.dumps(table))
    import yaml

    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return str(path)


def test_slug_merged_and_column_overrides():
    from fedshare.reproduce.jobs import Cell, column_overrides, merged, slug

    assert slug("xormixfl/table2 partition.target_labels=[0, 2]") == (
        "table2-partition.target_labels-0-2"
    )
    assert slug("p/!!") == "column" and slug("a/b/c d") == "b-c-d"
    assert merged(["a=1", "+b=2"], ["++a=3", "~c"], ["c=4"]) == ("+b=2", "++a=3", "c=4")
    assert column_overrides("p/t x=1 y=2") == ["experiment=p/t", "x=1", "y=2"]
    assert Cell("t", "p/t x=1", "fedavg", 3, ()).folder == "t-x-1/fedavg/seed3"


def test_available_jobs_are_paper_slash_table_of_every_yaml_in_order():
    from fedshare.reproduce.jobs import available_jobs

    jobs = available_jobs()
    assert jobs == sorted(jobs) and "flea/table1" in jobs and "baselines/checks" in jobs
    assert all(j.count("/") == 1 and not j.endswith((".yaml", ".py")) for j in jobs)
    assert not any(j.startswith("__") or "/__" in j for j in jobs)


def test_load_job_reads_scales_with_their_defaults(tmp_path):
    from fedshare.reproduce.jobs import Layout, load_job

    path = _job_files(
        tmp_path,
        {
            "numbers": ["t.json"],
            "description": "d",
            "seeds": [5, 6],
            "stats": ["best"],
            "recipe": "SGD",
            "data": {"*": "a.npz"},
            "scales": {
                "paper": None,
                "cpu": {
                    "seeds": [1],
                    "overrides": ["rounds=2"],
                    "columns": ["p/a"],
                    "methods": ["fedavg"],
                    "data": {"k=1": ["x", "y"]},
                    "cost_s": {"*": 3},
                    "note": "small",
                    "metric": "last5",
                    "stats": ["last5"],
                    "layout": {"name": "eps", "columns": [1, 2], "rows": {"r": ["a", None]}},
                    "lists": ["per_client"],
                    "column_means": 1,
                    "recipe": "Adam",
                    "recipe_exceptions": {"fedprox": "its paper"},
                    "method_overrides": {"fedavg": ["train.lr=1"]},
                    "extra_methods": {"ft": ["strategy=fedavg"]},
                },
            },
        },
    )
    job = load_job(path)
    assert job.numbers == (str(tmp_path / "t.json"),) and job.description == "d"
    paper, cpu = job.scale("paper"), job.scale("cpu")
    assert paper.seeds == (5, 6) and paper.overrides == () and paper.columns is None
    assert paper.methods is None and paper.stats == ("best",) and paper.recipe == "SGD"
    assert paper.data == {"*": ("a.npz",)} and paper.layout is None and not paper.column_means
    assert paper.metric is None and paper.lists == () and paper.cost_s == {}
    assert cpu.seeds == (1,) and cpu.overrides == ("rounds=2",)
    assert cpu.columns == {"p/a": ()} and cpu.methods == ("fedavg",)
    assert cpu.data == {"k=1": ("x", "y")} and cpu.cost_s == {"*": 3.0}
    assert (cpu.note, cpu.metric, cpu.stats, cpu.lists) == (
        "small",
        "last5",
        ("last5",),
        ("per_client",),
    )
    assert cpu.layout == Layout("eps", ("1", "2"), {"r": ("a", None)})
    assert cpu.column_means is True and cpu.recipe == "Adam"
    assert cpu.recipe_exceptions == {"fedprox": "its paper"}
    assert cpu.method_overrides == {"fedavg": ("train.lr=1",)}
    assert cpu.extra_methods == {"ft": ("strategy=fedavg",)}
    assert job.columns == ("p/a", "p/a k=1") and job.metric == "best_accuracy"
    assert job.methods == {
        "fedavg": ("strategy=fedavg",),
        "fedprox": ("strategy=fedprox",),
        "gone": None,
    }
    with pytest.raises(FedshareError, match=r"has no scale 'gpu'; its scales: cpu, paper"):
        job.scale("gpu")


def test_a_job_without_tables_needs_each_scales_columns_and_has_no_metric_of_its_own(tmp_path):
    from fedshare.reproduce.jobs import DEFAULT_METRIC, load_job

    (tmp_path / "a").mkdir()
    bad = _job_files(tmp_path / "a", {"scales": {"x": {"columns": ["p/a"]}, "y": {}, "z": None}})
    with pytest.raises(
        FedshareError, match=r"needs each scale's own 'columns'; scales without: y, z"
    ):
        load_job(bad)
    (tmp_path / "b").mkdir()
    job = load_job(_job_files(tmp_path / "b", {"scales": {"x": {"columns": ["p/a"]}}}))
    assert job.numbers == () and job.columns == () and job.methods == {}
    assert job.metric == DEFAULT_METRIC
    with pytest.raises(FedshareError, match=r"no reproducible table 'nope'; tables: "):
        load_job("nope")
    with pytest.raises(FedshareError, match=r"no reproducible table 'flea/none'"):
        load_job("flea/none")
    assert load_job("flea/table1").numbers == ("flea",)


def test_a_layout_needs_columns_and_rows_of_one_method_per_column(tmp_path):
    from fedshare.reproduce.jobs import _layout

    assert _layout("s", None) is None
    assert _layout("s", {"columns": [1], "rows": {"r": ["m"]}}).name == ""
    for raw in (
        {"rows": {"r": ["m"]}},
        {"columns": [1]},
        {"columns": [1, 2], "rows": {"r": ["m"]}},
        {"columns": [1], "rows": {"r": ["m"], "q": ["m", "n"]}},
    ):
        with pytest.raises(FedshareError, match=r"^scale s: a layout needs 'columns'"):
            _layout("scale s", raw)


def test_data_and_cost_follow_the_longest_matching_column_pattern(tmp_path):
    from fedshare.reproduce.jobs import cost_s, load_job, missing_data, needed_data

    job = load_job(
        _job_files(
            tmp_path,
            {
                "numbers": ["t.json"],
                "scales": {
                    "paper": {
                        "data": {"*": "any", "p/a": ["pa"], "p/a k": "pak"},
                        "cost_s": {"p/a": 10, "k=1": 20},
                    },
                    "cpu": {},
                },
            },
        )
    )
    assert needed_data(job, "paper", "p/a k=1") == ("pak",)
    assert needed_data(job, "paper", "p/a") == ("pa",)
    assert needed_data(job, "paper", "q/b") == ("any",)
    assert needed_data(job, "cpu", "p/a") == ()
    assert cost_s(job, "paper", "p/a k=1") == 20.0 and cost_s(job, "paper", "q") is None
    (tmp_path / "pa").write_text("")
    assert missing_data(job, "paper", "p/a", tmp_path) == []
    assert missing_data(job, "paper", "p/a k=1", tmp_path) == ["pak"]
    assert missing_data(job, "paper", "p/a", None) == ["pa"]


def test_cells_merge_overrides_in_order_seed_by_seed_and_only_cells_of_the_table(tmp_path):
    from fedshare.reproduce.jobs import Cell, cells

    path = _job_files(
        tmp_path,
        {
            "numbers": ["t.json"],
            "scales": {
                "paper": {
                    "seeds": [0, 1],
                    "overrides": ["rounds=5", "train.lr=0.1"],
                    "columns": {"p/a": ["experiment=null", "data=x"], "p/a k=1": None},
                    "method_overrides": {"fedprox": ["rounds=7"]},
                    "extra_methods": {"ft": ["strategy=fedavg", "ft=1"]},
                },
                "short": {"seeds": [3], "columns": ["p/a"], "methods": ["gone"]},
            },
        },
    )
    found = cells(path, "paper", seeds=None)
    assert [(c.seed, c.column, c.method) for c in found] == [
        (0, "p/a", "fedavg"),
        (0, "p/a", "fedprox"),
        (0, "p/a", "ft"),
        (0, "p/a k=1", "fedavg"),
        (0, "p/a k=1", "ft"),
        (1, "p/a", "fedavg"),
        (1, "p/a", "fedprox"),
        (1, "p/a", "ft"),
        (1, "p/a k=1", "fedavg"),
        (1, "p/a k=1", "ft"),
    ]
    assert found[1] == Cell(
        path,
        "p/a",
        "fedprox",
        0,
        ("train.lr=0.1", "data=x", "strategy=fedprox", "rounds=7", "seed=0"),
    )
    assert found[3].overrides == (
        "experiment=p/a",
        "k=1",
        "rounds=5",
        "train.lr=0.1",
        "strategy=fedavg",
        "seed=0",
    )
    picked = cells(path, "paper", columns=["k=1"], methods=["fedavg"], seeds=[9])
    assert [(c.seed, c.column, c.method) for c in picked] == [(9, "p/a k=1", "fedavg")]
    with pytest.raises(FedshareError, match=r"methods \['gone'\] are not runnable rows"):
        cells(path, "short")
    with pytest.raises(FedshareError, match=r"no column 'q'; columns: p/a, p/a k=1"):
        cells(path, "paper", columns=["q"])
    with pytest.raises(
        FedshareError, match=r"has no cell of methods \['fedprox'\] in columns p/a k=1"
    ):
        cells(path, "paper", columns=["p/a k=1"], methods=["fedprox"])


def test_pick_takes_exact_names_first_then_parts_without_repeats():
    from fedshare.reproduce.jobs import _pick

    known = ["a", "ab", "b"]
    assert _pick("column", None, known) == known and _pick("column", [], known) == known
    assert _pick("column", ["a"], known) == ["a"]
    assert _pick("column", ["b", "a", "ab"], known) == ["b", "a", "ab"]
    assert _pick("column", ["b", "ab"], known) == ["b", "ab"]
    with pytest.raises(FedshareError, match=r"no method 'c'; methods: a, ab, b"):
        _pick("method", ["c"], known)


# ---------------------------------------------------------------------------- reproduce/render
def _table(tmp_path: Path) -> str:
    path = tmp_path / "paper.json"
    path.write_text(
        json.dumps(
            {
                "table": "Table 1",
                "metric": "best_accuracy",
                "methods": {"fedavg": "FedAvg [3]", "fedprox": {"overrides": ["strategy=fedprox"]}},
                "entries": [],
            }
        )
    )
    return str(path)


def _item(numbers, column, method, values, paper=None, tolerance=3.0, **fields):
    from fedshare.paper.compare import Comparison
    from fedshare.reproduce.measure import Measured

    item = Measured(
        numbers, column, method, "best_accuracy", list(values), list(range(len(values)))
    )
    for key, value in fields.items():
        setattr(item, key, value)
    if paper is not None:
        item.paper = paper
        entry = PaperEntry("t", column, method, paper[0], paper[1])
        mean = item.mean_std[0]
        item.comparison = None if mean is None else Comparison(entry, mean, tolerance)
    return item


def test_method_and_column_names_as_the_paper_prints_them(tmp_path):
    from fedshare.reproduce.render import column_names, method_name

    table = _table(tmp_path)
    assert method_name(None, "fedavg") == "fedavg"
    assert method_name(table, "fedavg") == "FedAvg [3]"
    assert method_name(table, "fedprox") == "fedprox" and method_name(table, "x") == "x"
    assert column_names(["p/t a=1", "p/t a=2 b=3"]) == {"p/t a=1": "a=1", "p/t a=2 b=3": "a=2 b=3"}
    assert column_names(["p/t", "p/t a=1"]) == {"p/t": "t", "p/t a=1": "t a=1"}
    assert column_names(["p/t a=1", "q/u a=1"]) == {"p/t a=1": "t a=1", "q/u a=1": "u a=1"}
    assert column_names(["p/t/x"]) == {"p/t/x": "t/x"}


def test_stat_labels_name_every_kind_of_statistic():
    from fedshare.reproduce.render import stat_label

    expected = {
        "last10": "last-10",
        "best": "best",
        "settled": "settled",
        "last5": "last-5",
        "from5": "mean from round 5",
        "min_last10": "min last-10",
        "max_from3": "max from round 3",
        "absdelta_from10": "mean \\|Δ\\| from round 10",
        "absdelta_last7": "mean \\|Δ\\| last-7",
        "seeds": "per seed",
        "seeds:best_round": "best round per seed",
        "best%": "best %",
        "last10%": "last-10 %",
        "bytes_sent/1e6": "MB sent",
        "wall_time_s/60": "s / run / 60",
        "best@personal_accuracy": "best personal_accuracy",
        "last5@loss": "last-5 loss",
        "mds_std": "mds_std",
    }
    assert {name: stat_label(name) for name in expected} == expected


def test_summary_and_stat_texts_of_a_cell():
    from fedshare.reproduce.render import stat_text, summary_text

    assert summary_text(None) == MISSING and summary_text(3.14159) == "3.14"
    assert summary_text({"min": 1.0, "max": 2.5}) == "1.00–2.50"
    assert summary_text({"mean": 1.0, "std": None}) == "1.00"
    assert summary_text({"mean": 1.0}) == "1.00"
    assert summary_text({"mean": 1.0, "std": 0.5}) == "1.00 ± 0.50"
    item = _item(None, "p/t", "m", [50.0, 60.125])
    item.stats = [{"best_round": 7.0, "best": 61.0}, {"best_round": 12.0, "best": 63.0}]
    assert stat_text(item, "seeds") == "50.00 / 60.12"
    assert stat_text(item, "seeds:best_round") == "7 / 12"
    assert stat_text(item, "seeds:best") == "61.00 / 63.00"
    assert stat_text(item, "best") == "62.00 ± 1.41"
    assert stat_text(item, "seeds:gone") == f"{MISSING} / {MISSING}"
    assert stat_text(_item(None, "p/t", "m", []), "seeds") == MISSING


def test_pivot_marks_cells_within_the_tolerance_and_long_rows_list_the_comparison(tmp_path):
    from fedshare.reproduce.render import long_rows, pivot, within_text

    table = _table(tmp_path)
    items = [
        _item(table, "p/t a=1", "fedavg", [60.0, 62.0], paper=(58.0, 1.0), tolerance=3.0),
        _item(table, "p/t a=2", "fedavg", [70.0], paper=(60.0, 1.0), tolerance=3.0),
        _item(table, "p/t a=1", "fedprox", [50.0], paper=None),
        _item(table, "p/t a=2", "fedprox", [], paper=(40.0, 2.0)),
    ]
    assert [within_text(i) for i in items] == ["yes", "no", MISSING, MISSING]
    headers, rows = pivot(items)
    assert headers == ["method", "a=1", "a=2"]
    assert rows == [
        ["FedAvg [3]", "61.00 (58.00) ✓", "70.00 (60.00) ✗"],
        ["fedprox", f"50.00 ({MISSING})", f"{MISSING} (40.00)"],
    ]
    assert pivot(items[:3], check=True)[1] == [
        ["FedAvg [3]", "61.00 ± 1.41 (2)", "70.00 (1)"],
        ["fedprox", "50.00 (1)", ""],
    ]
    headers, rows = long_rows(items, ("best",))
    assert headers == ["column", "method", "measured", "paper", "Δ", "within max(3·std, 3)", "best"]
    assert rows[0] == [
        "a=1",
        "FedAvg [3]",
        "61.00 ± 1.41 (2)",
        "58.00 ± 1.00",
        "+3.00",
        "yes",
        MISSING,
    ]
    assert rows[1][3:6] == ["60.00 ± 1.00", "+10.00", "no"]
    assert rows[2][3:6] == [MISSING, MISSING, MISSING]
    headers, rows = long_rows(items[:1], ("best",), check=True)
    assert headers == ["column", "method", "measured", "best"] and len(rows[0]) == 4


def test_tables_markdown_per_paper_table_and_for_a_check(tmp_path):
    from fedshare.reproduce.measure import DEFAULT_STATS
    from fedshare.reproduce.render import tables_markdown

    table = _table(tmp_path)
    compared = [_item(table, "p/t", "fedavg", [60.0], paper=(58.0, 1.0))]
    text = tables_markdown(compared)
    assert text.startswith(f"Table 1 ({table}), metric `best_accuracy`: measured mean over seeds")
    lines = text.splitlines()
    assert sum(ln.startswith("| method ") for ln in lines) == 1
    assert sum(ln.startswith("| column ") for ln in lines) == 1
    assert text.endswith("|\n") and not text.endswith("\n\n")
    check = [_item(None, "p/t", "fedavg", [60.0, 61.0])]
    text = tables_markdown(check)
    assert text.startswith("A check of no paper table, its own columns and rows")
    assert "| column " not in text
    assert row_cells(text, "fedavg") == ["fedavg", "60.50 ± 0.71 (2)"]
    long = tables_markdown(check, ("best",))
    assert row_cells(long, "column") == ["column", "method", "measured", "best"]
    assert "| column " not in tables_markdown(check, DEFAULT_STATS)
    beside = tables_markdown([_item(table, "p/t", "fedavg", [1.0])])
    assert beside.startswith(f"A check beside Table 1 ({table}),")
    both = tables_markdown([*compared, *check])
    assert both.index("Table 1") < both.index("A check of no paper table")


def test_layout_lists_and_column_means_texts(tmp_path):
    from fedshare.reproduce.jobs import Layout
    from fedshare.reproduce.render import column_means, layout_markdown, lists_markdown

    table = _table(tmp_path)
    a = _item(table, "p/t a=1", "fedavg", [60.0, 64.0], paper=(58.0, 1.0))
    b = _item(table, "p/t a=1", "fedprox", [50.0], paper=None)
    c = _item(table, "p/t a=2", "fedavg", [70.0], paper=(75.0, 1.0))
    layout = Layout("eps", ("1", "2"), {"dp": ("fedavg", None), "plain": ("fedprox", "x")})
    text = layout_markdown([a, b], layout)
    assert text.splitlines()[0] == "The same cells, rows × eps: measured mean ± sample std (seeds)"
    assert row_cells(text, "dp") == ["dp", "62.00 ± 2.83 (2)", ""]
    assert row_cells(text, "plain") == ["plain", "50.00 (1)", ""]
    two = layout_markdown([a, c], Layout("", ("1",), {"r": ("fedavg",)}))
    assert "rows × parameter (column `a=1`)" in two and "(column `a=2`)" in two
    a.lists = {"acc": [[1.0, 2.0, 3.0], [3.0, 4.0], []]}
    b.lists = {"acc": [[], []]}
    text = lists_markdown([a, b], ["acc"])
    assert (
        "| FedAvg [3] | `acc` | 2.00 ± 1.41 (2) | 3.00 ± 1.41 (2) | 3.00 (1) | 2.75 ± 1.06 (2) |"
        in text
    )
    assert row_cells(text, "method") == ["method", "list", "1", "2", "3", "mean"]
    assert "fedprox" not in text and lists_markdown([b], ["acc"]) == ""
    d = _item(None, "p/t a=1", "fedavg", [61.0])
    text = layout_markdown([a, d], Layout("eps", ("1",), {"r": ("fedavg",)}))
    assert f"rows × eps ({table}): " in text and "rows × eps (None): " in text
    means = column_means([a, b, c, _item(table, "p/t a=3", "fedprox", [])])
    assert row_cells(means, "FedAvg [3]") == ["FedAvg [3]", "2", "66.00", "66.50", "5.00"]
    assert row_cells(means, "fedprox") == ["fedprox", "1", "50.00", MISSING, MISSING]
    assert means.startswith(f"Each row over its measured columns ({table}): ")
    zero = column_means([_item(None, "p/t", "m", [0.0]), _item(None, "p/u", "m", [3.0])])
    assert row_cells(zero, "m") == ["m", "2", "1.50", MISSING, MISSING]
    assert column_means([_item(None, "p/t", "m", [1.0])]).startswith(
        "Each row over its measured columns: "
    )


def test_write_csv_of_cells_and_the_range_as_midpoint_and_half_width(tmp_path):
    from fedshare.reproduce.render import _csv_summary, write_csv

    assert _csv_summary(None) == ("", "") and _csv_summary(2.5) == (2.5, "")
    assert _csv_summary({"min": 1.0, "max": 4.0}) == (2.5, 1.5)
    assert _csv_summary({"mean": 3.0, "std": None}) == (3.0, "")
    assert _csv_summary({"mean": 3.0, "std": 0.5}) == (3.0, 0.5)
    table = _table(tmp_path)
    items = [
        _item(table, "p/t", "fedavg", [60.0, 62.0], paper=(58.0, 1.0), tolerance=3.0),
        _item(None, "p/t", "ft", [], stored_stats={"best": {"min": 1.0, "max": 3.0}}),
    ]
    items[0].stats = [{"best": 61.0}, {"best": 65.0}]
    write_csv(items, tmp_path / "r.csv", ("best", "seeds:best"))
    rows = list(csv.reader((tmp_path / "r.csv").open()))
    assert rows[0][-2:] == ["best_mean", "best_std"] and len(rows[0]) == 15
    assert rows[1] == [
        table, "p/t", "fedavg", "best_accuracy", "2", "0;1", "61.0", str(2**0.5),
        "58.0", "1.0", "3.0", "3.0", "True", "63.0", str(8**0.5),
    ]  # fmt: skip
    assert rows[2] == ["", "p/t", "ft", "best_accuracy", "0", ""] + [""] * 7 + ["2.0", "1.0"]


def test_cell_labels_add_the_column_value_only_when_cells_span_columns(tmp_path):
    from fedshare.reproduce.render import _cell_labels

    table = _table(tmp_path)
    one = [_item(table, "p/t a=1", "fedavg", [1.0]), _item(table, "p/t a=1", "fedprox", [1.0])]
    assert _cell_labels(one) == ["FedAvg [3]", "fedprox"]
    two = [_item(table, "p/t a=1", "fedavg", [1.0]), _item(table, "p/t a=2", "fedavg", [1.0])]
    assert _cell_labels(two) == ["FedAvg [3] · 1", "FedAvg [3] · 2"]
    plain = [_item(table, "p/t", "fedavg", [1.0]), _item(table, "p/u", "fedavg", [1.0])]
    assert _cell_labels(plain) == ["FedAvg [3] · t", "FedAvg [3] · u"]


# ---------------------------------------------------------------------------- reproduce/docs
STORED = "docs/measured/baselines/checks-moon_partial.json"
"""A stored file of measured cells the docs' tables come from (relative to the checkout)."""


def test_regenerate_fills_blocks_whose_runs_are_here_and_keeps_the_others(tmp_path, capsys):
    from fedshare.reproduce.docs import block_text, regenerate

    doc = tmp_path / "a.md"
    here = f"<!-- reproduce:baselines/checks {STORED} -->\nold\n<!-- /reproduce -->"
    away = "<!-- reproduce:flea/table1 gone/dir -->\nkept\n<!-- /reproduce -->"
    doc.write_text(f"# A\n{here}\ntext\n{away}\n")
    body = block_text(f"baselines/checks {STORED}")
    assert body.startswith(
        f"Generated by `python -m fedshare.reproduce report baselines/checks {STORED}` "
        "(moon_partial scale).\n\n"
    )
    assert "| moon " in body and block_text("flea/table1 gone/dir") is None
    before = doc.read_text()
    assert regenerate([doc], check=True) == [doc] and doc.read_text() == before
    assert f"{doc}: out of date" in capsys.readouterr().out
    assert regenerate([doc]) == [doc]
    out = capsys.readouterr()
    assert f"{doc}: regenerated" in out.out
    assert f"{doc}: kept 'reproduce:flea/table1 gone/dir' (its runs are not here)" in out.err
    expected = f"# A\n<!-- reproduce:baselines/checks {STORED} -->\n{body}<!-- /reproduce -->"
    assert doc.read_text() == f"{expected}\ntext\n{away}\n"
    assert regenerate([doc]) == [] and capsys.readouterr().out == ""
    with pytest.raises(FedshareError, match=r"cannot read the marker 'reproduce:--bad'"):
        block_text("--bad")


def test_default_files_are_the_docs_markdown_and_the_readme(tmp_path, monkeypatch):
    from fedshare.reproduce.docs import default_files

    monkeypatch.chdir(tmp_path)
    assert default_files() == []
    (tmp_path / "docs").mkdir()
    for name in ("b.md", "a.md", "c.txt"):
        (tmp_path / "docs" / name).write_text("")
    assert default_files() == [Path("docs/a.md"), Path("docs/b.md")]
    (tmp_path / "README.md").write_text("")
    assert default_files() == [Path("docs/a.md"), Path("docs/b.md"), Path("README.md")]


def test_load_paper_lists_twenty_columns_or_presets_in_its_refusals(tmp_path):
    path = _table_file(tmp_path, [_entry(f"p/t c={i:02}", "m") for i in range(21)])
    with pytest.raises(FedshareError, match=r"columns: p/t c=00, .*, p/t c=19, … \(1 more\)$"):
        load_paper(path, "nope")
    path = _table_file(tmp_path, [_entry(f"p{i:02}/t", "m") for i in range(21)])
    with pytest.raises(FedshareError, match=r"--paper-column: p00/t, .*, p19/t, … \(1 more\)$"):
        load_paper(path)


def test_a_job_file_may_name_packaged_tables_and_its_first_table_makes_the_cells(tmp_path):
    from fedshare.reproduce.jobs import _pick, load_job, slug

    job = load_job(_job_files(tmp_path, {"numbers": ["t.json", "flea"], "scales": {"p": {}}}))
    assert job.numbers == (str(tmp_path / "t.json"), "flea")
    assert job.columns == ("p/a", "p/a k=1") and job.metric == "best_accuracy"
    assert list(job.methods) == ["fedavg", "fedprox", "gone"]
    with pytest.raises(FedshareError, match="no reproducible table"):
        load_job(str(tmp_path / "missing.yaml"))
    assert slug("plain x=1") == "plain-x-1"
    known = [f"c{i:02}" for i in range(31)]
    with pytest.raises(FedshareError, match=r"columns: c00, .*, c29, … \(1 more\)$"):
        _pick("column", ["zz"], known)


def test_a_two_table_job_takes_cells_metric_and_defaults_from_its_first(tmp_path, monkeypatch):
    from fedshare.reproduce import jobs

    path = _job_files(tmp_path, {"numbers": ["t.json", "flea"], "scales": {"p": {}}})
    job = jobs.load_job(path)
    assert job.scale("p").seeds == (0,)
    found = jobs.cells(path, "p")
    assert [(c.column, c.method) for c in found] == [
        ("p/a", "fedavg"),
        ("p/a", "fedprox"),
        ("p/a k=1", "fedavg"),
    ]
    table = {"metric": "final_accuracy", "entries": [_entry(f"p/a c={i}", "m") for i in range(7)]}
    table["entries"].append(_entry("p/a z", "fedprox"))
    (tmp_path / "seven").mkdir()
    (tmp_path / "seven" / "t.json").write_text(json.dumps(table))
    (tmp_path / "seven" / "job.yaml").write_text("numbers: [t.json, flea]\nscales: {p: {}}\n")
    seven = str(tmp_path / "seven" / "job.yaml")
    assert jobs.load_job(seven).metric == "final_accuracy"
    with pytest.raises(FedshareError, match=r"in columns p/a c=0, .*, p/a c=4, … \(2 more\)$"):
        jobs.cells(seven, "p", columns=["c="], methods=["fedprox"])
    monkeypatch.setattr(jobs, "available_jobs", lambda: [f"p/t{i:02}" for i in range(41)])
    with pytest.raises(FedshareError, match=r"tables: p/t00, .*, p/t39, … \(1 more\)$"):
        jobs.load_job("nope")
