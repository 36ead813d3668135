"""The relaxed acceptance rules, exactly: typical acceptance, lenience and speculative cascades.

Every rule keeps the lossless residual, so its output at a position is
pi(y) = p_draft(y) a(y) + (1 - sum_x p_draft(x) a(x)) residual(y). Here a(x) is read off the
engine's own `judge` by bisecting the uniform at which it stops accepting, so the rows a backend
computes (`acceptance_rows`) are checked against the decisions the engine makes.
"""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

import specplay
from specplay.cli import build_parser
from specplay.cli.configure import given, run_config
from specplay.cli.fidelity import parse_rules
from specplay.config.capabilities import MLX, VLLM_INSPECTION
from specplay.engine.accept import (
    entropy,
    judge,
    lossless_acceptance,
    residual_distribution,
    rule_output_distribution,
    tv_distance,
)
from specplay.engine.rules import (
    LOSSLESS,
    RULE_NAMES,
    RULES,
    AcceptanceRule,
    Cascade,
    Lenience,
    Mentored,
    RuleParams,
    Typical,
    all_settings,
    typical_threshold,
)
from specplay.errors import ConfigError
from specplay.fidelity.measure import DEFAULT_KNOBS, sweep_rules
from tests.support.distributions import RELAXED, random_pairs

VOCAB = 12


def stats_of(p_target: np.ndarray, p_draft: np.ndarray) -> dict[str, float]:
    """What a backend reports at a position, for any rule."""
    return {
        "tv": float(tv_distance(p_target, p_draft)),
        "entropy": float(entropy(p_target, np)),
        "max_p_target": float(p_target.max()),
        "max_p_draft": float(p_draft.max()),
    }


def judge_at(rule: AcceptanceRule, p_target: np.ndarray, p_draft: np.ndarray, x: int, u: float):
    return judge(
        rule,
        greedy=False,
        token_id=x,
        target_argmax=0,
        p_target_x=p_target[x],
        p_draft_x=p_draft[x],
        stats=stats_of(p_target, p_draft),
        uniform=u,
    )


def judged_acceptance(rule: AcceptanceRule, p_target: np.ndarray, p_draft: np.ndarray, x: int) -> float:
    """The measure of uniforms under which the engine's `judge` keeps x: the boundary, bisected."""

    def keeps(u: float) -> bool:
        return judge_at(rule, p_target, p_draft, x, u).accepted

    if keeps(np.nextafter(1.0, 0.0)):
        return 1.0
    low, high = 0.0, 1.0
    if not keeps(low):
        return 0.0
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if keeps(middle) else (low, middle)
    return high


def engine_output(rule: AcceptanceRule, p_target: np.ndarray, p_draft: np.ndarray) -> np.ndarray:
    """What one drafted position emits when the engine judges: x ~ p_draft kept with the measure of
    uniforms `judge` accepts, else a draw from the residual."""
    accept = np.array([judged_acceptance(rule, p_target, p_draft, x) for x in range(len(p_target))])
    kept = p_draft * accept
    return kept + (1.0 - kept.sum()) * residual_distribution(p_target, p_draft, np)


@pytest.mark.parametrize("rule", RELAXED, ids=repr)
def test_each_rules_output_is_the_formula_and_its_tv_is_exact(rule: AcceptanceRule) -> None:
    for p_target, p_draft in random_pairs(60, VOCAB, seed=5):
        rows = rule.acceptance_rows(p_target[None], p_draft[None], np)[0]
        residual = residual_distribution(p_target, p_draft, np)
        pi = rule_output_distribution(p_draft, rows, residual, np)
        np.testing.assert_allclose(engine_output(rule, p_target, p_draft), pi, atol=1e-12)
        assert pi.sum() == pytest.approx(1.0, abs=1e-12) and (pi >= -1e-15).all()
        # Each rule accepts what lossless acceptance accepts, and more.
        assert (rows >= lossless_acceptance(p_target, p_draft, np) - 1e-15).all()
        spent = float(rule.tv_spent(p_target[None], p_draft[None], np)[0])
        assert spent == pytest.approx(float(tv_distance(pi, p_target)), abs=1e-12)
        assert spent == pytest.approx(analytic_tv(rule, p_target, p_draft), abs=1e-12)


def analytic_tv(rule: AcceptanceRule, p_target: np.ndarray, p_draft: np.ndarray) -> float:
    """TV(pi, p_target) by each rule's own closed form. The extra mass a rule keeps lies where
    p_draft > p_target (elsewhere lossless acceptance keeps everything), and the residual gives
    back exactly that much less: the TV is the acceptance gained."""
    short = p_target < p_draft  # where lossless acceptance rejects some of the time
    d = float(tv_distance(p_target, p_draft))
    if isinstance(rule, Lenience):
        return float((np.minimum(p_draft, rule.lenience * p_target) - p_target)[short].sum())
    if isinstance(rule, Typical):
        threshold = typical_threshold(float(entropy(p_target, np)), rule.typical_epsilon, rule.delta, np)
        return float((p_draft - p_target)[short & (p_target > threshold)].sum())
    if isinstance(rule, Cascade):
        return d if p_draft.max() >= p_target.max() - rule.cascade_alpha else 0.0
    assert isinstance(rule, Mentored)
    return min(d, rule.tv_budget)


@pytest.mark.parametrize(
    "rule",
    [
        Lenience(lenience=1.0),
        Typical(typical_epsilon=1.5, typical_delta=float(VOCAB)),
        Cascade(cascade_alpha=-1.0),
    ],
    ids=["lenience-1", "typical-eps-above-1", "cascade-alpha-minus-1"],
)
def test_the_lossless_ends_of_each_knob_are_exactly_lossless(rule: AcceptanceRule) -> None:
    for p_target, p_draft in random_pairs(60, VOCAB, seed=6):
        rows = rule.acceptance_rows(p_target[None], p_draft[None], np)[0]
        np.testing.assert_array_equal(rows, lossless_acceptance(p_target, p_draft, np))
        assert float(rule.tv_spent(p_target[None], p_draft[None], np)[0]) == pytest.approx(0.0, abs=1e-12)
        for x, u in zip(range(VOCAB), np.linspace(0, 0.999, VOCAB), strict=True):
            assert not judge_at(rule, p_target, p_draft, x, float(u)).relaxed


def test_typical_acceptance_with_epsilon_above_1_still_relaxes_where_the_target_is_unsure() -> None:
    # Medusa's threshold is min(epsilon, delta * exp(-H)): epsilon above 1 leaves the entropy term,
    # which is below 1 wherever H > ln(delta). Only a delta that large makes the rule lossless.
    p_target = np.full(VOCAB, 1.0 / VOCAB)
    p_draft = np.eye(VOCAB)[0] * 0.9 + 0.1 / VOCAB
    assert typical_threshold(float(entropy(p_target, np)), 1.5, 0.9, np) == pytest.approx(0.9 / VOCAB)
    rule = Typical(typical_epsilon=1.5, typical_delta=0.9)
    spent = float(rule.tv_spent(p_target[None], p_draft[None], np)[0])
    assert spent == pytest.approx(float(tv_distance(p_target, p_draft)))  # every token is typical: pi = p_draft
    rule = Typical(typical_epsilon=1.5, typical_delta=1.2)
    assert float(rule.tv_spent(p_target[None], p_draft[None], np)[0]) == pytest.approx(0.0, abs=1e-12)


def test_the_cascade_follows_the_drafter_where_it_is_as_sure_as_the_target() -> None:
    p_target, p_draft = np.array([0.5, 0.3, 0.2]), np.array([0.1, 0.6, 0.3])
    trusting = Cascade(cascade_alpha=0.0)  # 0.6 >= 0.5
    rows = trusting.acceptance_rows(p_target[None], p_draft[None], np)[0]
    np.testing.assert_array_equal(rows, [1.0, 1.0, 1.0])
    pi = rule_output_distribution(p_draft, rows, residual_distribution(p_target, p_draft, np), np)
    np.testing.assert_allclose(pi, p_draft)
    doubting = Cascade(cascade_alpha=-0.2)  # 0.6 < 0.7
    rows = doubting.acceptance_rows(p_target[None], p_draft[None], np)[0]
    np.testing.assert_allclose(rows, [1.0, 0.5, 2 / 3])


def test_out_of_range_knobs_are_refused_naming_the_knob() -> None:
    for params, name in [
        ({"lenience": 0.5}, "lenience"),
        ({"typical_epsilon": -1.0}, "typical_epsilon"),
        ({"typical_delta": float("nan")}, "typical_delta"),
        ({"cascade_alpha": 1.5}, "cascade_alpha"),
        ({"tv_budget": -0.1}, "tv_budget"),
    ]:
        with pytest.raises(ConfigError) as error:
            RuleParams(**params)
        assert error.value.field == name


# The registry: every layer reads the rules from it, so adding one touches engine/rules.py alone.


def _modules_spelling(words: set[str]) -> set[str]:
    """The modules of specplay/ that write one of `words` as a string literal."""
    package = Path(specplay.__file__).parent
    found = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in words:
                found.add(path.relative_to(package).as_posix())
    return found


def test_no_module_but_the_registry_spells_a_rules_name() -> None:
    """A rule's name as a string literal elsewhere would be a comparison or a table that a new
    rule would have to be added to."""
    assert _modules_spelling(set(RULE_NAMES)) == {"engine/rules.py"}


def test_no_module_but_the_registry_spells_a_knobs_flag_or_symbol() -> None:
    """The TV budget's `--tv` and D, and every other knob's flag and symbol, are read from the rule
    (an error names the flag the rule gives, a report the symbol)."""
    spelt = {s.flag for s in all_settings()} | {rule.knob.symbol for rule in RULES.values()}
    assert _modules_spelling(spelt) == {"engine/rules.py"}


def test_every_layer_offers_every_registered_rule() -> None:
    assert tuple(RULES) == RULE_NAMES and len(RULE_NAMES) >= 4
    assert [f.name for f in fields(RuleParams)] == [s.field for s in all_settings()]  # every setting, once
    assert MLX.rules == RULE_NAMES  # full distributions: every rule
    assert VLLM_INSPECTION.rules == tuple(name for name, rule in RULES.items() if not rule.full_distributions)
    assert parse_rules("all") == list(RULE_NAMES) and list(DEFAULT_KNOBS) == list(RULE_NAMES)
    rule_flag = next(
        a for a in build_parser()._subparsers._group_actions[0].choices["run"]._actions if a.dest == "rule"
    )
    assert tuple(rule_flag.choices) == (LOSSLESS, *RULE_NAMES)  # and the lossless rule by that name
    for name, rule in RULES.items():
        assert rule.__doc__ and rule.description and rule.knob.setting in rule.settings
        assert RuleParams().__getattribute__(rule.knob.setting.field) == getattr(rule(), rule.knob.setting.field)
        # Each setting is a flag of its own, read into the run's settings.
        for setting in rule.settings:
            value = rule.knob.lossless if setting is rule.knob.setting and rule.knob.lossless is not None else 1.0
            args = build_parser().parse_args(["run", "--prompt", "x", "--rule", name, setting.flag, str(value)])
            settings = run_config(given(args)).settings
            assert getattr(settings.rule_params, setting.field) == value and settings.acceptance_rule.name == name
        # A fidelity sweep makes one rule of the kind per knob value, labelled by it.
        swept = sweep_rules({name: rule.knob.sweep})
        assert [type(r) for r in swept] == [rule] * len(rule.knob.sweep)
        assert [r.value for r in swept] == list(rule.knob.sweep)
        assert len({r.row_label() for r in swept}) == len(swept)
