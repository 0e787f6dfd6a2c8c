"""config/ pinned exactly (docs/mutation.md, the `config_*` entries): each value rule's
bounds, open ends, lists and text and its description; binding parameters to a factory and
their type checks; the one-sentence problems of a bad value; what a resumed run may change.
No run, no Hydra composition."""

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

from fedshare.config.params import (
    accepted_params,
    check_params,
    non_finite,
    params_of,
    type_ok,
    type_text,
    unknown_param_message,
)
from fedshare.config.rules import (
    FLOAT32_MAX,
    RULE,
    SEED_LIMIT,
    SOURCE,
    Rule,
    _show,
    ruled,
)
from fedshare.config.validation import (
    check_combinations,
    check_fields,
    check_key,
    check_typed,
    close_choice,
    command_line_problem,
    declared_fields,
    flat_values,
    rule_of,
    type_name,
    typed_fields,
    value_problem,
)
from fedshare.errors import FedshareError


# ---------------------------------------------------------------------------- rules
def test_a_closed_range_takes_its_bounds_and_an_open_one_does_not():
    closed = Rule(low=0, high=1)
    assert [closed.accepts(v) for v in (-0.01, 0, 0.5, 1, 1.01)] == [0, 1, 1, 1, 0]
    left = Rule(low=0, high=1, low_open=True)
    assert [left.accepts(v) for v in (0, 1e-9, 1, 1.01)] == [0, 1, 1, 0]
    right = Rule(low=0, high=1, high_open=True)
    assert [right.accepts(v) for v in (-1e-9, 0, 1 - 1e-9, 1)] == [0, 1, 1, 0]
    assert [Rule(low=2).accepts(v) for v in (1, 2, 10**30)] == [0, 1, 1]
    assert [Rule(low=2, low_open=True).accepts(v) for v in (2, 2.5)] == [0, 1]
    assert [Rule(high=2).accepts(v) for v in (-(10**30), 2, 2.5)] == [1, 1, 0]
    assert [Rule(high=2, high_open=True).accepts(v) for v in (1.5, 2)] == [1, 0]


def test_numbers_must_be_finite_and_not_bools_or_text():
    rule = Rule()
    assert rule.accepts(3) and rule.accepts(-2.5)
    for bad in (True, False, float("nan"), float("inf"), -float("inf"), [3], None):
        assert not rule.accepts(bad), bad
    assert Rule(optional=True).accepts(None) and not Rule(low=0).accepts(None)
    assert Rule(any_value=True).accepts(float("nan")) and Rule(any_value=True).accepts([])
    assert not Rule(any_value=True).accepts(None)
    assert Rule(any_value=True, optional=True).accepts(None)


def test_choices_alone_or_as_a_non_empty_list():
    one = Rule(choices=("a", "b"))
    assert one.accepts("a") and not one.accepts("c") and not one.accepts(["a"])
    assert not one.accepts(1)
    several = Rule(choices=("a", "b"), scalar_or_list=True)
    assert several.accepts("b") and several.accepts(["a", "b"]) and several.accepts(("a",))
    assert not several.accepts([]) and not several.accepts(["a", "c"]) and not several.accepts("c")
    assert not Rule(choices=()).accepts("a")


def test_lists_of_numbers_by_length_non_emptiness_and_range():
    pair = Rule(low=0, high=1, length=2)
    assert pair.accepts([0, 1]) and pair.accepts((0.5, 0.5))
    assert not pair.accepts([0.5]) and not pair.accepts([0, 2]) and not pair.accepts(0.5)
    assert not pair.accepts([0, True])
    numbers = Rule(low=1, numbers=True)
    assert numbers.accepts([]) and numbers.accepts([1, 5]) and not numbers.accepts([0])
    assert numbers.accepts(3) and not numbers.accepts("3")
    nonempty = Rule(numbers=True, nonempty=True)
    assert not nonempty.accepts([]) and nonempty.accepts([-1.5])
    either = Rule(low=0, high=1, scalar_or_list=True)
    assert either.accepts(0.5) and either.accepts([0.5, 1]) and not either.accepts([])
    assert not either.accepts("0.5") and not either.accepts([0.5, 2])
    assert not Rule(low=0).accepts([1]) and not Rule().accepts([])


def test_text_is_taken_only_where_no_number_is_asked_and_non_empty_means_not_blank():
    assert Rule().accepts("x") and Rule().accepts("")
    assert Rule(nonempty=True).accepts("x") and not Rule(nonempty=True).accepts("  ")
    assert not Rule(nonempty=True).accepts("")
    assert not Rule(high=1).accepts("x") and not Rule(low=1).accepts("x")
    assert not Rule(numbers=True).accepts("x") and not Rule(scalar_or_list=True).accepts("x")
    assert not Rule(length=1).accepts("x")


def test_describe_says_what_a_valid_value_is():
    cases = {
        Rule(any_value=True): "any value of its type",
        Rule(choices=("a", "b")): "one of a, b",
        Rule(choices=("a",), scalar_or_list=True, optional=True): (
            "one of a, or a non-empty list of them (or null)"
        ),
        Rule(): "a finite number",
        Rule(low=0, high=1): "a finite number in [0, 1]",
        Rule(low=0, high=1, low_open=True): "a finite number in (0, 1]",
        Rule(low=0, high=1, high_open=True): "a finite number in [0, 1)",
        Rule(low=0.5): "a finite number >= 0.5",
        Rule(low=0, low_open=True): "a finite number > 0",
        Rule(high=2): "a finite number <= 2",
        Rule(high=2, high_open=True): "a finite number < 2",
        Rule(low=0, length=2): "a list of 2 numbers, each a finite number >= 0",
        Rule(length=3): "a list of 3 numbers, each a finite number",
        Rule(
            low=0, scalar_or_list=True
        ): "a finite number >= 0, or a non-empty list of such numbers",
        Rule(numbers=True): "a list of numbers, each a finite number",
        Rule(
            numbers=True, nonempty=True, low=1
        ): "a non-empty list of numbers, each a finite number >= 1",
        Rule(nonempty=True, optional=True): "a non-empty text (or null)",
        Rule(low=0, high=SEED_LIMIT, high_open=True): "a finite number in [0, 2^64)",
        Rule(low=0, high=FLOAT32_MAX): "a finite number in [0, 3.4e38]",
    }
    assert {rule: rule.describe() for rule in cases} == cases
    assert _show(2.0) == "2" and _show(0.25) == "0.25" and _show(-3) == "-3"


def test_ruled_fields_carry_their_rule_and_source_and_a_default_or_factory():
    rule = Rule(low=1)

    @dataclasses.dataclass
    class Config:
        a: int = ruled(3, rule, "paper: Eq. 1")
        b: list = ruled(rule=rule, default_factory=lambda: [1])
        c: int = ruled()

    a, b, c = dataclasses.fields(Config)
    assert a.metadata[RULE] is rule and a.metadata[SOURCE] == "paper: Eq. 1"
    assert Config().a == 3 and Config().b == [1] and Config().b is not Config().b
    assert b.metadata[SOURCE] == "" and c.metadata[RULE] is None and Config().c is None


# ---------------------------------------------------------------------------- params
def factory(x, y, /, a: int, b: float = 1.0, *args, c: Sequence[int] = (), d=None, **kw):
    """A factory taking two positional inputs first."""


def test_accepted_params_skip_positional_inputs_and_keep_keyword_ones_with_their_types():
    assert list(accepted_params(factory, skip=2)) == ["a", "b", "c", "d"]
    assert list(accepted_params(factory)) == ["a", "b", "c", "d"]
    assert list(accepted_params(lambda p, q, r: None, skip=1)) == ["q", "r"]
    assert list(accepted_params(lambda p, q: None)) == ["p", "q"]
    params = accepted_params(factory, skip=2)
    assert params["a"].annotation is int and params["c"].annotation == Sequence[int]
    assert params["d"].annotation is Any

    @dataclasses.dataclass
    class Made:
        k: int = 1
        hidden: int = dataclasses.field(default=0, init=False)
        free: Any = None

    made = accepted_params(Made, skip=5)
    assert list(made) == ["k", "free"] and made["k"].annotation is int
    assert made["k"].kind is made["k"].KEYWORD_ONLY
    assert params_of(Made(k=4)) == {"k": 4, "free": None}


def test_type_ok_checks_numbers_text_sequences_unions_and_mappings():
    assert type_ok(1, float) and type_ok(1.5, float) and not type_ok(True, float)
    assert type_ok(2, int) and not type_ok(2.0, int) and not type_ok(False, int)
    assert type_ok("a", str) and not type_ok(1, str) and type_ok(True, bool)
    assert not type_ok(1, bool)
    assert type_ok(None, int | None) and type_ok(3, int | None) and not type_ok("3", int | None)
    assert type_ok(None, type(None)) and not type_ok(0, type(None))
    assert type_ok([1, 2], list[int]) and not type_ok([1, "2"], list[int])
    assert type_ok((1, 2.5), Sequence[float]) and not type_ok("ab", Sequence[str])
    assert type_ok([1, "x"], list) and type_ok([], Sequence[int])
    assert type_ok((1, "a"), tuple[int, str]) and not type_ok((1, 2), tuple[int, str])
    assert not type_ok((1,), tuple[int, str]) and type_ok((1, 2, 3), tuple[int, ...])
    assert not type_ok((1, "a"), tuple[int, ...])
    assert type_ok({"a": 1}, dict[str, int]) and type_ok({"a": "x"}, dict)
    assert not type_ok([1], dict[str, int])
    assert type_ok(object(), Any) and type_ok("x", Any)
    assert type_ok(3, Path) and type_ok(3, Mapping[str, int])  # other types: not checked


def test_type_text_and_non_finite():
    assert type_text(int) == "int" and type_text(Sequence[int]) == "Sequence[int]"
    assert type_text(int | None) == "int | None"
    assert type_text(list[float]) == "list[float]"
    assert type_text(TypeVar("T")) == "~T"  # not a class: as `str` shows it
    assert non_finite(float("nan")) and non_finite([1.0, [float("inf")]])
    assert not non_finite(1.0) and not non_finite([1, 2.0]) and not non_finite("nan")


def test_check_params_names_the_bad_key_type_or_value_and_makes_ints_floats():
    got = check_params(factory, {"a": 1, "b": 2, "c": [3]}, "model", "toy", skip=2)
    assert got == {"a": 1, "b": 2.0, "c": [3]} and isinstance(got["b"], float)
    assert isinstance(check_params(factory, {"a": 1}, "m", "t", skip=2)["a"], int)
    assert check_params(lambda a, b: None, {"a": 1, "b": 2}, "m", "t") == {"a": 1, "b": 2}
    with pytest.raises(
        FedshareError,
        match=r"^model 'toy' has no parameter 'bb' \(did you mean 'b'\?\); its "
        r"parameters are: a, b, c, d$",
    ):
        check_params(factory, {"bb": 1}, "model", "toy", skip=2)
    with pytest.raises(
        FedshareError, match=r"^model 'toy' parameter 'a' must be of type int, got 1\.5$"
    ):
        check_params(factory, {"a": 1.5}, "model", "toy", skip=2)
    with pytest.raises(
        FedshareError, match=r"^model 'toy' parameter b=nan is not valid: it must be finite"
    ):
        check_params(factory, {"b": float("nan")}, "model", "toy", skip=2)
    with pytest.raises(FedshareError, match=r"parameter d=\[inf\] is not valid"):
        check_params(factory, {"d": [float("inf")]}, "model", "toy", skip=2)


def test_unknown_param_message_suggests_other_places_first():
    assert unknown_param_message("strategy", "s", "lr", [], ["train.lr"]) == (
        "strategy 's' has no parameter 'lr' (did you mean 'train.lr'?); its parameters are: none"
    )
    assert unknown_param_message("strategy", "s", "nuu", ["nu", "k"]) == (
        "strategy 's' has no parameter 'nuu' (did you mean 'nu'?); its parameters are: k, nu"
    )


# ---------------------------------------------------------------------------- validation
@dataclasses.dataclass
class Inner:
    rate: float = ruled(0.5, Rule(low=0, high=1))
    name: str = ruled("a", Rule(choices=("alpha", "beta")))


@dataclasses.dataclass
class Outer:
    size: int = ruled(1, Rule(low=1))
    inner: Inner = dataclasses.field(default_factory=Inner)
    tags: Any = ruled(None, Rule(choices=("x", "y"), scalar_or_list=True, optional=True))
    flag: bool = ruled(False, Rule(any_value=True))
    free: int = dataclasses.field(default=0, init=False, metadata={RULE: Rule(low=5)})


def test_typed_fields_reach_nested_dataclasses_and_every_field_needs_a_rule():
    fields = typed_fields(Inner, "p.")
    assert list(fields) == ["p.rate", "p.name"] and fields["p.rate"][0] is float

    @dataclasses.dataclass
    class Bare:
        size: int = 1

    with pytest.raises(TypeError, match=r"config field 'size' declares no Rule"):
        typed_fields(Bare)
    assert rule_of(dataclasses.fields(Inner)[0]) == Rule(low=0, high=1)
    assert list(declared_fields(Outer)) == ["size", "tags", "flag"]


def test_value_problem_is_one_sentence_naming_the_type_or_the_rule():
    rule = Rule(low=0, high=1)
    assert value_problem("k", 0.5, float, rule) is None
    assert value_problem("k", None, float | None, rule) is None
    assert value_problem("k", None, float, Rule(optional=True)) is None
    assert value_problem("k", None, float, rule) == (
        "k=None is not valid: it must be of type float"
    )
    assert value_problem("k", "x", float, rule) == "k='x' is not valid: it must be of type float"
    assert value_problem("k", 2, float, rule) == (
        "k=2 is not valid: it must be a finite number in [0, 1]"
    )
    assert value_problem("k", 2, bool, rule) == (
        "k=2 is not valid: it must be of type bool (true or false)"
    )
    choice = Rule(choices=("alpha", "beta"), scalar_or_list=True)
    assert value_problem("k", ["alpha", "bta"], Any, choice) == (
        "k=['alpha', 'bta'] is not valid (did you mean 'beta'?): it must be one of alpha, beta, "
        "or a non-empty list of them"
    )
    assert close_choice("zzz", choice) == "" and close_choice(3, choice) == ""
    assert close_choice("alpa", Rule()) == "" and close_choice(["alpha"], choice) == ""
    assert close_choice(("alpha", "bet"), choice) == " (did you mean 'beta'?)"
    assert close_choice(["bta", "alph"], choice) == " (did you mean 'beta'?)"  # the first
    assert type_name(bool) == "bool (true or false)" and type_name(int) == "int"
    assert type_name(int | None) == "int | None"


def test_command_line_problems_are_nulls_that_need_a_value_and_switches_given_numbers():
    assert command_line_problem("train.lr", None) == (
        "train.lr=null is not valid: it must be a finite number in (0, 3.4e38); leave train.lr "
        "out for its default"
    )
    assert command_line_problem("rounds", None) is None  # optional: the preset's
    assert command_line_problem("run_dir", None) is None
    assert command_line_problem("train.amp", 3) == (
        "train.amp=3 is not valid: it must be of type bool (true or false)"
    )
    assert command_line_problem("train.amp", True) is None
    assert command_line_problem("train.lr", 3) is None
    assert command_line_problem("strategy.mu", None) is None
    assert command_line_problem("model", None) is None  # a group's null: the group check's


def test_check_key_and_check_typed_refuse_with_the_prefixed_key():
    check_key(Outer, "inner.rate", 1)
    check_key(Outer, "unknown", "anything")
    with pytest.raises(FedshareError, match=r"^inner\.rate=2 is not valid: it must be a finite"):
        check_key(Outer, "inner.rate", 2)
    check_typed(Outer, {"size": 3, "inner": {"rate": 0.0}, "other": 9})
    with pytest.raises(FedshareError, match=r"^x\.inner\.name='beta2' is not valid \(did you"):
        check_typed(Outer, {"inner": {"name": "beta2"}}, "x.")
    with pytest.raises(FedshareError, match=r"^size=0 is not valid"):
        check_typed(Outer, {"size": 0})


def test_flat_values_keep_the_features_options_mapping_whole():
    values = {"a": {"b": 1, "c": {"d": 2}}, "features_options": {"k": 1}, "e": []}
    assert flat_values(values) == {"a.b": 1, "a.c.d": 2, "features_options": {"k": 1}, "e": []}
    assert flat_values({"data": {"features_options": {"k": 1}}}) == {"data.features_options.k": 1}


def test_check_fields_checks_every_ruled_field_of_an_instance():
    check_fields(Outer(), "s")
    with pytest.raises(FedshareError, match=r"^s\.size=0 is not valid"):
        check_fields(Outer(size=0), "s")
    with pytest.raises(FedshareError, match=r"^s\.tags=\['x', 'z'\] is not valid"):
        check_fields(Outer(tags=["x", "z"]), "s")


def test_a_zero_decay_is_refused_only_with_a_schedule_that_multiplies_by_it():
    for schedule in ("exp", "step"):
        with pytest.raises(
            FedshareError,
            match=rf"^train\.lr_decay=0 with train\.lr_schedule={schedule} would make every",
        ):
            check_combinations({"train": {"lr_schedule": schedule, "lr_decay": 0}})
    check_combinations({"train": {"lr_schedule": "exp", "lr_decay": 0.5}})
    check_combinations({"train": {"lr_schedule": "cosine", "lr_decay": 0}})
    check_combinations({"train": None})
    check_combinations({})


# ---------------------------------------------------------------------------- resume
def test_changeable_keys_and_their_sub_keys_and_the_unset_values():
    from fedshare.config.resume import changeable, unset

    for key in ("rounds", "run_dir", "resume", "train.compile", "checkpoint.every", "data.root"):
        assert changeable(key), key
    assert changeable("logger.name")
    for key in ("roundsx", "train.lr", "seed", "checkpoint", "data"):
        assert not changeable(key), key
    assert unset("rounds", None) and unset("train.lr", None) and unset("model.name", "auto")
    assert not unset("seed", None) and not unset("rounds", 5) and not unset("train.lr", 0.1)
    assert not unset("model.name", "cnn") and not unset("model.width", "auto")
    assert not unset("trainer", None)


def test_touched_lists_what_the_command_line_sets_and_a_preset_as_everything():
    from fedshare.config.resume import touched

    overrides = ["train.lr=0.1", "experiment=flea/cpu", "hydra.run.dir=x", "~seed", "+a.b=1"]
    assert touched(overrides) == ["train.lr", "", "a.b"]
    assert touched([]) == []


def test_recorded_label_is_the_summarys_partition_name_or_none(tmp_path):
    from fedshare.config.resume import recorded_label

    assert recorded_label(tmp_path) is None
    summary = tmp_path / "summary.json"
    for text, label in (
        ('{"partition": "dir0.3"}', "dir0.3"),
        ('{"partition": 3}', None),
        ("[1]", None),
        ("{", None),
        ("{}", None),
    ):
        summary.write_text(text)
        assert recorded_label(tmp_path) == label, text


def test_check_agreement_names_up_to_four_conflicts_and_how_many_more(tmp_path):
    from fedshare.config.resume import check_agreement

    given = {"a": 1, "b": {"c": 2, "d": 3}, "rounds": 9, "train": {"lr": None}, "seed": 1}
    recorded = {"a": 1, "b": {"c": 5, "d": 3}, "rounds": 4, "train": {"lr": 0.1}, "seed": 2}
    check_agreement(given, recorded, ["a", "b.d", "rounds", "train"], tmp_path)
    with pytest.raises(
        FedshareError,
        match=r"cannot resume .* with b\.c=2 \(the run has 5\): a resumed run keeps its own "
        r"settings, read from its config\.yaml; leave those out \(only rounds, progress, ",
    ):
        check_agreement(given, recorded, ["b"], tmp_path)
    with pytest.raises(FedshareError, match=r"with b\.c=2 \(the run has 5\), seed=1 \(the run"):
        check_agreement(given, recorded, ["", "b.c"], tmp_path)
    with pytest.raises(FedshareError, match=r"with bc=1 \(the run has None\):"):
        check_agreement({"bc": 1}, {}, ["b", "bc"], tmp_path)
    many = {f"k{i}": i for i in range(6)}
    with pytest.raises(FedshareError, match=r"k3=3 \(the run has None\) and 2 more: "):
        check_agreement(many, {}, [""], tmp_path)
    with pytest.raises(FedshareError, match=r"k3=3 \(the run has None\) and 1 more: "):
        check_agreement(dict(list(many.items())[:5]), {}, [""], tmp_path)
    with pytest.raises(FedshareError, match=r"k3=3 \(the run has None\): "):
        check_agreement(dict(list(many.items())[:4]), {}, [""], tmp_path)


def test_resumed_config_takes_the_record_and_only_the_changeable_keys_given(tmp_path):
    from omegaconf import OmegaConf

    from fedshare.config.resume import resumed_config

    cfg = OmegaConf.create({"rounds": 30, "seed": 1, "device": "cpu", "progress": False})
    cfg.run_dir = str(tmp_path)
    cfg.resume = True
    assert resumed_config(cfg, [], tmp_path) == (cfg, None)
    (tmp_path / "config.yaml").write_text("rounds: 10\nseed: 1\ndevice: cuda\nprogress: true\n")
    (tmp_path / "summary.json").write_text('{"partition": "iid"}')
    merged, label = resumed_config(cfg, ["rounds=30", "run_dir=x", "resume=true"], tmp_path)
    assert label == "iid"
    assert (merged.rounds, merged.seed, merged.device, merged.progress) == (30, 1, "cuda", True)
    assert merged.resume is True and merged.run_dir == str(tmp_path)
    assert merged.workers == 1  # RunConfig's defaults fill what the record lacks
    merged, _ = resumed_config(cfg, ["experiment=x/cpu", "progress=false"], tmp_path)
    assert (merged.rounds, merged.device, merged.progress) == (10, "cuda", False)
    assert merged.resume is True  # asked for on the command line, not by a key it types
    cfg.rounds = None
    assert resumed_config(cfg, ["rounds=null"], tmp_path)[0].rounds == 10
    (tmp_path / "config.yaml").write_text("- 1\n")
    with pytest.raises(FedshareError, match=r"its config\.yaml is a list, not the run's"):
        resumed_config(cfg, [], tmp_path)
    (tmp_path / "config.yaml").write_text("a: [1\n")
    with pytest.raises(FedshareError, match=r"its config\.yaml cannot be read"):
        resumed_config(cfg, [], tmp_path)
    (tmp_path / "config.yaml").write_text("rounds: many\n")
    with pytest.raises(
        FedshareError,
        match=r"does not fit this fedshare's settings \(Value 'many' of type 'str' could not "
        r"be converted to Integer\); start a new run$",
    ):
        resumed_config(cfg, [], tmp_path)


# ---------------------------------------------------------------------------- compose, overrides
def test_override_args_leave_out_flags_and_the_values_of_flags_that_take_one():
    from fedshare.config.compose import override_args

    argv = ["-m", "--config-name", "x", "a=1", "-cd", "d", "b=2", "--multirun", "-cp", "p", "c"]
    assert override_args(argv) == ["a=1", "b=2", "c"]
    assert override_args(["-cn", "-cd", "e=1"]) == ["e=1"]
    assert override_args([]) == []


def test_members_are_each_sweep_runs_overrides_and_an_empty_run_folder_is_refused():
    from fedshare.config.compose import members

    assert members(["a=1,2", "b=3", "hydra.job.chdir=true"]) == [["a=1", "b=3"], ["a=2", "b=3"]]
    assert members(["run_dir=x"]) == [["run_dir=x"]]
    assert members(["seed=null", "train.name="]) == [["seed=null", "train.name="]]
    assert members(["run_dir=a,b"]) == [["run_dir=a"], ["run_dir=b"]]
    for arg in ("run_dir=", "run_dir=' '", "hydra.sweep.dir=null", "hydra.run.dir="):
        with pytest.raises(FedshareError, match=r"^[a-z_.]+=.* is empty; give a folder for the"):
            members([arg])
    with pytest.raises(FedshareError, match=r"^run_dir= is empty"):
        members(["run_dir=null"])


def test_composes_and_sets_key():
    from fedshare.config.compose import composes, sets_key

    for override in ("+a=1", "~seed", "strategy.mu=1", "data=mnist", "experiment=x", "hydra.a=1"):
        assert composes(override), override
    for override in ("train.lr=1", "seed=1", "strategyx=1", "rounds=3"):
        assert not composes(override), override
    assert sets_key("data.features_options={b: 1}", "data.features_options.b")
    assert sets_key("+strategy.mu=1", "strategy.mu") and sets_key("strategy.mu.x=1", "strategy.mu")
    assert not sets_key("data=mnist", "data.x") and not sets_key("strategy.m=1", "strategy.mu")
    assert not sets_key("strategy.mux=1", "strategy.mu")


def test_fields_of_run_and_run_keys_named():
    from fedshare.config.compose import fields_of_run, run_keys_named

    fields = fields_of_run()
    assert fields[0] == "rounds" and {"seed", "strategy", "run_dir", "train"} <= set(fields)
    assert run_keys_named("lr") == ["train.lr"]
    assert run_keys_named("batch_size") == ["train.batch_size", "eval.batch_size"]
    assert run_keys_named("nothing") == [] and run_keys_named("rounds") == ["rounds"]


def _groups(tmp_path):
    for path in ("strategy/fedavg.yaml", "strategy/sub/fedx.yaml", "data/digits.yaml", "x.txt"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    for group in ("partition", "model", "experiment"):
        (tmp_path / group).mkdir()
    return tmp_path


def test_check_overrides_refuses_unknown_options_nulls_and_bad_typed_values(tmp_path):
    from fedshare.config.overrides import check_overrides, group_options

    root = _groups(tmp_path)
    assert group_options(root, "strategy") == ["fedavg", "sub/fedx"]
    check_overrides(["-m", "strategy=fedavg,sub/fedx", "train.lr=0.1", "~seed", "+x=1"], root)
    check_overrides(["hydra.run.dir=a", "experiment=null", "strategy.mu=1", "rounds=3"], root)
    check_overrides(["strategy.mu=1", "strategy.mu.x=2"], root)  # the groups' keys: not typed
    with pytest.raises(FedshareError, match=r"^unknown strategy 'fedavgg' \(did you mean"):
        check_overrides(["strategy=fedavg,fedavgg"], root)
    with pytest.raises(FedshareError, match=r"^data=null is not valid: choose a data by name; "):
        check_overrides(["data=null"], root)
    with pytest.raises(FedshareError, match=r"^train\.amp=3 is not valid"):
        check_overrides(["train.amp=3"], root)
    with pytest.raises(
        FedshareError,
        match=r"^seed='x' is not valid: Value 'x' of type 'str' could not be converted to "
        r"Integer$",
    ):
        check_overrides(["seed=1,x"], root)
    with pytest.raises(
        FedshareError,
        match=r"^cannot read the command line: no viable alternative at input "
        r"'\[1'$",
    ):
        check_overrides(["a=[1"], root)


def test_an_unknown_typed_key_names_its_valid_siblings_and_where_its_name_is_valid():
    from pathlib import Path

    from fedshare.config.overrides import check_overrides

    root = Path(__file__).resolve().parents[1] / "configs"
    with pytest.raises(
        FedshareError, match=r"^unknown key 'lr' \(did you mean 'train\.lr'\?\); valid keys: "
    ):
        check_overrides(["lr=0.1"], root)
    with pytest.raises(
        FedshareError,
        match=r"^unknown key 'eval\.evry' \(did you mean 'every'\?\); valid keys "
        r"of eval: ",
    ):
        check_overrides(["eval.evry=2"], root)
    with pytest.raises(FedshareError, match=r"^eval\.every='x' is not valid: Value 'x' of"):
        check_overrides(["eval.every=x"], root)
    with pytest.raises(
        FedshareError, match=r"^unknown key 'eval\.every\.x'; valid keys of eval\.every: none$"
    ):
        check_overrides(["eval.every.x=1"], root)


# ---------------------------------------------------------------------------- defaults
class _Method:
    """The strategy attributes the layered defaults read."""

    name = "toy"
    one_shot = False
    train_defaults: dict[str, Any] = {"lr": 0.3, "momentum": 0.7}  # noqa: RUF012


def test_defaults_layer_command_line_over_strategy_over_dataset_over_global():
    from fedshare.config.defaults import DATASET_TRAIN, resolve_train
    from fedshare.config.schema import TrainConfig

    got = resolve_train({"lr": 0.5, "momentum": None}, _Method, "fmnist")
    assert (got.lr, got.momentum) == (0.5, 0.7)
    assert got.weight_decay == DATASET_TRAIN["fmnist"]["weight_decay"] == 5e-4
    assert got.batch_size == TrainConfig().batch_size
    assert resolve_train({}, _Method, "unknown").optimizer == TrainConfig().optimizer


def test_rounds_default_and_a_one_shot_strategys_single_round():
    from fedshare.config.defaults import global_default, resolve_rounds
    from fedshare.config.schema import SimulationConfig

    assert resolve_rounds(None, _Method) == SimulationConfig().rounds == 20
    assert resolve_rounds(7, _Method) == 7
    assert global_default(SimulationConfig, "seed") == 0

    class OneShot(_Method):
        one_shot = True

    assert resolve_rounds(None, OneShot) == 1 and resolve_rounds(1, OneShot) == 1
    with pytest.raises(
        FedshareError, match=r"^strategy 'toy' is one-shot .*, but rounds=3; leave rounds unset"
    ):
        resolve_rounds(3, OneShot)


# ---------------------------------------------------------------------------- a whole run's check
def _run_values(**changes):
    values = {
        "strategy": {"name": "fedprox", "mu": 0.1},
        "data": {"name": "digits", "val_fraction": 0.1},
        "partition": {"name": "dirichlet", "alpha": 0.5, "seed": 3},
        "model": {"name": "mlp", "hidden": [8]},
        "train": {"lr": 0.1, "momentum": None},
        "rounds": 2,
    }
    values.update(changes)
    return values


def test_check_run_builds_the_strategy_and_checks_every_group_and_typed_key():
    from fedshare.config.validation import check_run

    strategy = check_run(_run_values())
    assert type(strategy).__name__ == "FedProx" and strategy.mu == 0.1
    check_run(_run_values(model={"name": "auto"}, hydra={"x": 1}))
    bad = {
        "rounds": (0, r"^rounds=0 is not valid"),
        "train": ({"lr": -1.0}, r"^train\.lr=-1\.0 is not valid"),
        "data": ({"name": "digits", "val_fraction": 1}, r"^data\.val_fraction=1 is not valid"),
        "model": ({"name": "mlp", "width": 3}, r"^model 'mlp' has no parameter 'width'"),
        "partition": ({"name": "dirichlet", "alfa": 1}, r"^partition 'dirichlet' has no param"),
        "strategy": ({"name": "fedprox", "mu": -1.0}, r"^strategy\.mu=-1\.0 is not valid"),
    }
    for key, (value, message) in bad.items():
        with pytest.raises(FedshareError, match=message):
            check_run(_run_values(**{key: value}))
    with pytest.raises(FedshareError, match=r"^dataset 'digits' has no parameter 'size'"):
        check_run(_run_values(data={"name": "digits", "size": 3}))
    check_run(_run_values(data={"name": "digits", "test_fraction": 0.3}))
    positional = {  # each factory's inputs are no config keys
        "data": {"name": "digits", "request": 1},
        "partition": {"name": "dirichlet", "rng": 1},
        "model": {"name": "mlp", "num_classes": 3},
    }
    for group, node in positional.items():
        with pytest.raises(FedshareError, match=r" has no parameter '(request|rng|num_classes)'"):
            check_run(_run_values(**{group: node}))
    for group in ("strategy", "data", "partition", "model"):
        with pytest.raises(FedshareError, match=rf"^{group}=None is not valid: choose a {group}"):
            check_run(_run_values(**{group: None}))
        with pytest.raises(FedshareError, match=rf"^{group}=\{{'name': ''\}} is not valid"):
            check_run(_run_values(**{group: {"name": ""}}))
    with pytest.raises(FedshareError, match=r"^train\.lr_decay=0 with train\.lr_schedule=exp"):
        check_run(_run_values(train={"lr_schedule": "exp", "lr_decay": 0}))


def test_check_simulation_config_checks_the_typed_settings_and_their_combinations():
    from fedshare.config.schema import SimulationConfig, TrainConfig
    from fedshare.config.validation import check_simulation_config

    check_simulation_config(SimulationConfig())
    with pytest.raises(FedshareError, match=r"^rounds=0 is not valid"):
        check_simulation_config(SimulationConfig(rounds=0))
    with pytest.raises(FedshareError, match=r"^train\.batch_size=0 is not valid"):
        check_simulation_config(SimulationConfig(train=TrainConfig(batch_size=0)))
    train = TrainConfig(lr_schedule="step", lr_decay=0.0)
    with pytest.raises(FedshareError, match=r"^train\.lr_decay=0 with train\.lr_schedule=step"):
        check_simulation_config(SimulationConfig(train=train))


# ---------------------------------------------------------------------------- api, assemble
def test_api_settings_from_an_instance_a_mapping_or_none_and_unknown_fields_refused():
    from fedshare.config.api import as_config, explicit_train
    from fedshare.config.schema import EvalConfig, TrainConfig

    given = EvalConfig(every=3)
    assert as_config(EvalConfig, given) is given
    assert as_config(EvalConfig, None) == EvalConfig()
    assert as_config(EvalConfig, {"every": 2}) == EvalConfig(every=2)
    with pytest.raises(
        FedshareError, match=r"^EvalConfig has no field\(s\) \['evry'\]; its fields are \["
    ):
        as_config(EvalConfig, {"evry": 2})
    assert explicit_train(None) == {}
    assert explicit_train({"lr": 0.5}) == {"lr": 0.5}
    assert explicit_train(TrainConfig(lr=0.5))["lr"] == 0.5
    assert explicit_train(TrainConfig()) == dataclasses.asdict(TrainConfig())
    with pytest.raises(FedshareError, match=r"^TrainConfig has no field\(s\) \['rate'\]"):
        explicit_train({"rate": 1})


def test_assemble_resolves_auto_models_and_layers_the_settings():
    from types import SimpleNamespace

    from fedshare.config.assemble import model_name, resolve_config

    data = SimpleNamespace(dataset=SimpleNamespace(default_model="cnn_small"))
    assert model_name("auto", data) == "cnn_small" and model_name("mlp", data) == "mlp"
    config = resolve_config(_Method, "fmnist", train={"lr": 0.2}, seed=4, device=None)
    assert (config.rounds, config.seed, config.device) == (20, 4, "auto")
    assert (config.train.lr, config.train.momentum, config.train.weight_decay) == (0.2, 0.7, 5e-4)
    assert resolve_config(_Method, "digits", rounds=3).rounds == 3
    with pytest.raises(TypeError):  # rounds and train are keyword-only
        resolve_config(_Method, "digits", 3)
