"""The ε of r reports of a memoised metric in one window, against the exact joint law.

The r reports share the memoised response, so r·ε₁ (composition) is not a bound in general;
client_sdk.window_charge computes the exact worst-case log-likelihood ratio on a sufficient
statistic. Here every output sequence is enumerated for small cases, from the protocols' own
round probabilities, and the maximum log-ratio over pairs of values compared with it.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from client_sdk.registry import parse_registry
from client_sdk.window_charge import joint_epsilon, window_epsilon
from sketches import server_half


def protocol(name: str, d: int, epsilon: float, epsilon_inf: float, **extra):
    table = {"kind": "categorical", "categories": [f"v{i}" for i in range(d)], "protocol": name,
             "epsilon": epsilon, "epsilon_inf": epsilon_inf, **extra}
    return server_half(parse_registry({"metrics": {"m": table}}).get("m"))


def brute_grr(k: int, p1: float, q1: float, p2: float, q2: float, r: int) -> float:
    """Every sequence of r reports over [k]: max over x, x′ of log P(y | x)/P(y | x′)."""
    first = np.full((k, k), q1) + np.eye(k) * (p1 - q1)       # P(b | x)
    second = np.full((k, k), q2) + np.eye(k) * (p2 - q2)      # P(y | b)
    worst = 0.0
    for ys in itertools.product(range(k), repeat=r):
        like = np.prod(second[:, list(ys)], axis=1)           # P(y₁…y_r | b)
        px = first @ like
        worst = max(worst, math.log(px.max() / px.min()))
    return worst


def brute_bits(d: int, p1: float, q1: float, p2: float, q2: float, r: int, windows: list[tuple[int, ...]] | None
               ) -> float:
    """Unary memo bits over [d] (bit u: 1 w.p. p₁ if u is the value, q₁ otherwise), each report
    flipping every bit afresh; ``windows``: dBitFlipPM's sampled positions (the value is one of
    them or none: the memo bits of a window)."""
    positions = windows or [tuple(range(d))]
    worst = 0.0
    for window in positions:
        width = len(window)
        memos = list(itertools.product((0, 1), repeat=width))
        keys = list(range(width)) + ([None] if windows else [])        # which bit holds the value
        law = {}
        for key in keys:
            pb = np.array([np.prod([(p1 if i == key else q1) if b else (1 - (p1 if i == key else q1))
                                    for i, b in enumerate(m)]) for m in memos])
            law[key] = pb
        outs = list(itertools.product(memos, repeat=r))
        for out in outs:
            like = np.array([np.prod([np.prod([(p2 if b else q2) if o else (1 - (p2 if b else q2))
                                               for b, o in zip(m, report)]) for report in out]) for m in memos])
            probs = [float(law[key] @ like) for key in keys]
            worst = max(worst, math.log(max(probs) / min(probs)))
    return worst


@pytest.mark.parametrize("d, epsilon, epsilon_inf", [(3, 0.3, 3.0), (4, 0.1, 0.5), (5, 0.01, 0.5), (3, 2.0, 4.0)])
@pytest.mark.parametrize("r", [1, 2, 3, 4])
def test_lgrr_joint_epsilon_is_the_exact_law(d, epsilon, epsilon_inf, r):
    pr = protocol("lgrr", d, epsilon, epsilon_inf)
    par = pr.params
    exact = min(brute_grr(d, par.p1, par.q1, par.p2, par.q2, r), pr.epsilon_longitudinal)
    assert joint_epsilon(pr, r) == pytest.approx(exact, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("r", [1, 2, 3])
def test_loloha_joint_epsilon_is_grr_over_its_cells(r):
    pr = protocol("loloha", 40, 1.0, 3.0)
    par = pr.params
    assert joint_epsilon(pr, r) == pytest.approx(brute_grr(par.g, par.p1, par.q1, par.p2, par.q2, r), rel=1e-9)


@pytest.mark.parametrize("epsilon, epsilon_inf", [(1.0, 3.0), (0.3, 4.0)])
@pytest.mark.parametrize("r", [1, 2])
def test_losue_joint_epsilon_is_the_exact_law(epsilon, epsilon_inf, r):
    pr = protocol("losue", 3, epsilon, epsilon_inf)
    par = pr.params
    exact = brute_bits(3, par.p1, par.q1, par.p2, par.q2, r, None)
    assert joint_epsilon(pr, r) == pytest.approx(min(exact, pr.epsilon_longitudinal), rel=1e-9)


@pytest.mark.parametrize("sampled", [1, 2])
@pytest.mark.parametrize("r", [1, 2, 3])
def test_dbitflip_joint_epsilon_is_the_exact_law_and_composition_holds(sampled, r):
    pr = protocol("dbitflip", 4, 1.0, 3.0, sampled_buckets=sampled)
    par = pr.params
    exact = brute_bits(4, par.p1, par.q1, par.p2, par.q2, r, [tuple(range(sampled))])
    assert joint_epsilon(pr, r) == pytest.approx(min(exact, pr.epsilon_longitudinal), rel=1e-9)
    assert window_epsilon(pr, r) == pytest.approx(r * pr.epsilon, rel=1e-9)   # symmetric memo: r·ε₁ holds


def test_r_epsilon_one_is_not_a_window_bound_for_lgrr():
    """The failing case: L-GRR at d = 64, ε₁ = 0.01, ε∞ = 0.5 — ten reports reveal 0.478."""
    pr = protocol("lgrr", 64, 0.01, 0.5)
    assert window_epsilon(pr, 10) == pytest.approx(0.4782, abs=5e-4)
    assert window_epsilon(pr, 10) > 4 * 10 * pr.epsilon
    assert joint_epsilon(pr, 100) <= pr.epsilon_longitudinal + 1e-12     # one key: at most ε∞
    small = protocol("lgrr", 3, 0.3, 3.0)                      # and a small excess at d = 3
    assert window_epsilon(small, 3) > 3 * small.epsilon


def test_window_epsilon_takes_the_worst_split_of_keys():
    pr = protocol("lgrr", 64, 0.01, 0.5)
    joint = [joint_epsilon(pr, j) for j in range(1, 7)]
    splits = max(sum(joint[j - 1] for j in parts) for n in range(1, 7)
                 for parts in itertools.combinations_with_replacement(range(1, 7), n) if sum(parts) == 6)
    assert window_epsilon(pr, 6) == pytest.approx(splits, rel=1e-12)
    assert window_epsilon(pr, 6) >= 6 * pr.epsilon - 1e-12


def test_metrics_check_says_what_the_ledger_charges_a_window(tmp_path):
    from click.testing import CliRunner

    from cli.main import main

    cats = ", ".join(f'"a{i}"' for i in range(64))
    reg = tmp_path / "m.toml"
    reg.write_text(f'[metrics.page]\nkind = "categorical"\ncategories = [{cats}]\nprotocol = "lgrr"\n'
                   'epsilon = 0.01\nepsilon_inf = 0.5\nreports_per_window = 10\n'
                   f'[metrics.flip]\nkind = "categorical"\ncategories = [{cats}]\nprotocol = "dbitflip"\n'
                   'epsilon = 1.0\nepsilon_inf = 3.0\nreports_per_window = 10\n'
                   '[device]\nepsilon_per_window = 20.0\n')
    result = CliRunner().invoke(main, ["metrics", "check", str(reg)])
    assert result.exit_code == 0, result.output
    assert "note: page: 10 reports in one window share the memoised response and reveal up to eps 0.4782" \
        in result.output
    assert "the ledger charges eps 0.4782 per window" in result.output
    assert "note: flip" not in result.output                  # r·ε₁ holds for dBitFlipPM
    assert "the metrics may charge 10.48 per window" in result.output    # 0.4782 + 10 x 1.0
