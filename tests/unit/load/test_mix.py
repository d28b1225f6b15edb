"""`load/mix`: a mix's tables checked in one line each, its draws reproducible per request
and within the binomial bound of their plan, its shares as the plan says."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from anvil_metrics.errors import ScenarioError, UsageError
from anvil_metrics.load.mix import Mix, mix_from_table, parse_mix, uniform
from anvil_metrics.load.scenario import scenario_from_dict, scenario_to_dict

DRAWS = 2000
Z = 3.29  # two-sided 99.9 %: a right draw is outside once in a thousand runs of one check


def within_binomial(count: int, n: int, p: float) -> bool:
    return abs(count - n * p) <= Z * math.sqrt(n * p * (1 - p))


CLASSES = [{"name": "chat", "weight": 3, "max_tokens": 64},
           {"name": "long", "weight": 1, "context_tokens": 1024, "model": "lora-c"}]


def test_class_draws_follow_their_weights_and_are_the_same_each_time() -> None:
    mix = parse_mix(CLASSES, None, 7, None)
    assert mix is not None and mix.class_shares() == (0.75, 0.25)
    drawn = [mix.class_of(k) for k in range(DRAWS)]
    counts = Counter(drawn)
    assert within_binomial(counts[0], DRAWS, 0.75) and counts[0] + counts[1] == DRAWS
    assert drawn == [parse_mix(CLASSES, None, 7, None).class_of(k) for k in range(DRAWS)]
    other_seed = [parse_mix(CLASSES, None, 8, None).class_of(k) for k in range(DRAWS)]
    assert other_seed != drawn


@pytest.mark.parametrize("assignment,alpha", [("random", None), ("zipf", 1.2),
                                              ("round-robin", None)])
def test_model_draws_follow_their_assignment(assignment: str, alpha: float | None) -> None:
    table = {"names": ["base", "lora-a", "lora-b"], "assignment": assignment,
             **({"zipf_alpha": alpha} if alpha else {})}
    mix = parse_mix(None, table, 3, None)
    assert mix is not None
    shares = mix.model_shares()
    if assignment == "zipf":
        w = [1, 2 ** -1.2, 3 ** -1.2]
        assert shares == pytest.approx([x / sum(w) for x in w])
    else:
        assert shares == pytest.approx([1 / 3] * 3)
    counts = Counter(mix.model_of(k, None) for k in range(DRAWS))
    for i, p in enumerate(shares):
        assert within_binomial(counts[i], DRAWS, p), (i, counts)
    if assignment == "round-robin":
        assert [mix.model_of(k, None) for k in range(6)] == [0, 1, 2, 0, 1, 2]


def test_a_class_keeps_its_own_model_and_the_shares_count_it() -> None:
    mix = parse_mix(CLASSES, {"names": ["base", "lora-a"], "assignment": "random"}, 0, None)
    assert mix is not None and mix.model_names == ("base", "lora-a", "lora-c")
    assert mix.model_shares() == pytest.approx([0.375, 0.375, 0.25])
    for k in range(200):
        klass = mix.class_of(k)
        model = mix.model_of(k, klass)
        assert (model == 2) == (klass == 1)


def test_uniform_is_in_range_and_spread() -> None:
    values = [uniform(0, 1, k) for k in range(DRAWS)]
    assert all(0 <= v < 1 for v in values)
    assert within_binomial(sum(v < 0.5 for v in values), DRAWS, 0.5)


def test_the_tables_round_trip_through_the_header_and_the_scenario() -> None:
    doc = {"measurement_protocol": "m", "context_tokens": 1024, "max_context_tokens": 2048,
           "max_tokens": 16, "context_seed": 5, "request_class": CLASSES,
           "models": {"names": ["base", "lora-a"], "assignment": "zipf", "zipf_alpha": 1}}
    sc = scenario_from_dict(doc)
    assert sc.mix is not None and sc.mix.seed == 5
    assert mix_from_table(sc.mix.to_table()) == sc.mix
    assert scenario_from_dict(scenario_to_dict(sc)) == sc
    assert Mix().to_table() == {"request_class": [], "seed": 0}


BASE = {"measurement_protocol": "m", "context_tokens": 2048, "max_context_tokens": 2048,
        "max_tokens": 16}


@pytest.mark.parametrize("extra,where,allowed", [
    ({"request_class": [{"name": "a", "weight": 0}]}, "request_class[0].weight",
     "a finite number > 0"),
    ({"request_class": [{"name": "a"}]}, "request_class[0].weight", "(required)"),
    ({"request_class": [{"name": "a", "weight": 1}, {"name": "a", "weight": 2}]},
     "request_class[1].name", "a name no other class has"),
    ({"request_class": [{"name": "a", "weight": 1, "size": 3}]}, "request_class[0].size",
     "one of the keys"),
    ({"request_class": [{"name": "a", "weight": 1, "context_tokens": 2040}]},
     "request_class[0].context_tokens", "2040 + 16 = 2056"),
    ({"request_class": [{"name": "a", "weight": 1, "thinking_mode": "maybe"}]},
     "request_class[0].thinking_mode", "one of"),
    ({"request_class": {"name": "a"}}, "request_class", "an array of tables"),
    ({"request_class": [{"name": "a", "weight": 1, "dataset": ""}]},
     "request_class[0].dataset", "a file's path"),
    ({"request_class": [{"name": "a", "weight": 1, "dataset": "d", "trace": "t"}]},
     "request_class[0].trace", "none beside the class's dataset"),
    ({"request_class": [{"name": "a", "weight": 1, "trace": "t", "context_tokens": 64}]},
     "request_class[0].trace", "none beside the class's context_tokens"),
    ({"request_class": [{"name": "a", "weight": 1, "check": "coding"}]},
     "request_class[0].check", "['json', 'reasoning_leakage', 'tools', 'retrieval']"),
    ({"request_class": [{"name": "a", "weight": 1, "check": "retrieval"}]},
     "request_class[0].context_tokens", "required beside check = 'retrieval'"),
    ({"request_class": [{"name": "a", "weight": 1, "check": "json", "context_tokens": 64}]},
     "request_class[0].context_tokens", "none beside check"),
    ({"models": {"names": []}}, "models.names", "a non-empty list"),
    ({"models": {"names": ["a", "a"]}}, "models.names", "each name once"),
    ({"models": {"names": ["a"], "assignment": "weighted"}}, "models.assignment",
     "one of ['round-robin', 'random', 'zipf']"),
    ({"models": {"names": ["a"], "assignment": "zipf"}}, "models.zipf_alpha", "required"),
    ({"models": {"names": ["a"], "zipf_alpha": 1.0}}, "models.zipf_alpha", "no zipf_alpha"),
    ({"request_class": [{"name": "a", "weight": 1}],
      "conversation": {"turns": 2, "turn_tokens": 64}}, "request_class",
     "no request classes with [conversation]"),
])
def test_a_bad_table_is_one_line_naming_the_field(extra: dict, where: str,
                                                 allowed: str) -> None:
    with pytest.raises(ScenarioError) as e:
        scenario_from_dict({**BASE, **extra})
    text = str(e.value)
    assert where in text and allowed in text and "\n" not in text, text


def test_flags_give_the_models_over_the_table() -> None:
    from anvil_metrics.load.options import run_options

    opts = run_options({"models": "base, lora-a,lora-b", "model_assignment": "zipf:1.5"},
                       host="http://h", users=1, api_key=None)
    mix = opts.scenario.mix
    assert mix is not None and mix.models is not None
    assert (mix.models.names, mix.models.assignment, mix.models.zipf_alpha) == (
        ("base", "lora-a", "lora-b"), "zipf", 1.5)
    over = run_options({"models": "base, lora-a,lora-b", "model_assignment": "random"},
                       host="http://h", users=1, api_key=None).scenario.mix
    assert over is not None and over.models is not None
    assert over.models.names == mix.models.names
    assert (over.models.assignment, over.models.zipf_alpha) == ("random", None)


@pytest.mark.parametrize("names,assignment,said", [
    ("a,a", None, "--models 'a,a': models.names = ['a', 'a'] is not allowed; use each name"),
    ("a", "zipf", "--model-assignment 'zipf': models.zipf_alpha = None is not allowed"),
    ("a", "zipf:-1", "--model-assignment 'zipf:-1': models.zipf_alpha = -1.0 is not allowed"),
    ("a", "weighted", "--model-assignment 'weighted': models.assignment = 'weighted' is not"),
    (None, "random", "--model-assignment 'random' needs models.names (--models) too"),
])
def test_a_bad_models_flag_is_one_line_naming_it(names: str | None, assignment: str | None,
                                                 said: str) -> None:
    from anvil_metrics.load.options import run_options

    with pytest.raises(UsageError) as e:
        run_options({"models": names, "model_assignment": assignment}, host="http://h",
                    users=1, api_key=None)
    assert str(e.value).startswith(said) and "\n" not in str(e.value), str(e.value)
