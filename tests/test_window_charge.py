"""The ledger charges what r reports of a memoised metric in one window reveal (client_sdk.window_charge).

r reports sharing a GRR or OUE memo are not independent given the value: r·ε₁ undercharges
(L-GRR at d = 64, ε₁ = 0.01, ε∞ = 0.5: ten reports reveal 0.478). The charges C(k) must be an
upper bound of the exact W(k) for every k (exact up to EXACT_REPORTS, a linear bound beyond), the
ledger's window spend after k reports must be C(k), and every refusal must use that figure.
"""

from __future__ import annotations

import math

import pytest

from client_sdk import TelemetryClient
from client_sdk.ledger import Book, Charge, Refusal, apply
from client_sdk.registry import parse_registry
from client_sdk.testing import MemoryTransport
from client_sdk.window_charge import (
    EXACT_REPORTS,
    _best_splits,
    cumulative_charges,
    joint_epsilon,
    next_charge,
    window_epsilon,
)
from collector.testing import FakeCollector
from sketches import server_half

DAY = 20_000


def spec(name: str, d: int, epsilon: float, epsilon_inf: float, rpw: int, **extra):
    table = {"kind": "categorical", "categories": [f"v{i}" for i in range(d)], "protocol": name,
             "epsilon": epsilon, "epsilon_inf": epsilon_inf, "reports_per_window": rpw, **extra}
    return parse_registry({"metrics": {"m": table}}).get("m")


def charge_of(s, digest: str, day: int = DAY, device_window: float | None = None) -> Charge:
    pr = server_half(s)
    return Charge(s.name, s.fingerprint, day, pr.epsilon, pr.epsilon_longitudinal, digest, s.reports_per_window,
                  None, device_window, None, s.window_charges)


def noon(day: int, plus: int = 0):
    return ("boot:test", day * 86_400 + 43_200 + plus)


CELLS = [("lgrr", 64, 0.01, 0.5, None), ("lgrr", 300, 1.0, 3.0, None), ("lgrr", 3, 0.1, 2.0, None),
         ("lgrr", 8, 0.3, 6.0, None), ("losue", 16, 0.2, 4.0, None), ("loloha", 40, 0.2, 2.0, None),
         ("loloha", 40, 0.1, 2.0, 16), ("loloha", 20, 0.1, 2.0, 3)]   # last: hash_range g


@pytest.mark.parametrize("name, d, eps, eps_inf, g", CELLS)
def test_the_charges_bound_the_exact_window_epsilon_for_every_count(name, d, eps, eps_inf, g):
    rpw = EXACT_REPORTS + 16            # past the exact table: the linear tail must still bound W(k)
    s = spec(name, d, eps, eps_inf, rpw, **({"hash_range": g} if g else {}))
    charges = s.window_charges
    pr = server_half(s)
    if charges is None:              # then r·ε₁ must be the figure: checked against the exact law
        exact = _best_splits([0.0] + [joint_epsilon(pr, j) for j in range(1, 12)])[1:]
        assert all(w <= k * pr.epsilon * (1 + 1e-9) for k, w in enumerate(exact, start=1))
        return
    exact = _best_splits([0.0] + [joint_epsilon(pr, j) for j in range(1, rpw + 1)])[1:]
    for k, w in enumerate(exact, start=1):
        assert charges.total(k) >= w * (1 - 1e-12), k
        assert charges.total(k) >= k * pr.epsilon * (1 - 1e-12)
        if k <= EXACT_REPORTS:
            assert charges.total(k) == pytest.approx(max(w, k * pr.epsilon), rel=1e-12)   # exact there
    # a memo key alone is capped at ε∞; the tail's slope is within a factor of the true rate
    assert charges.slope <= max(exact[-1] / rpw, eps_inf / (EXACT_REPORTS + 1)) * 1.5 + pr.epsilon


@pytest.mark.parametrize("d", [2, 3, 8, 64, 300])
def test_losue_keeps_epsilon_one_per_report(d):
    """L-OSUE's OUE memo is asymmetric, yet W(r) = r·ε₁ (client_sdk/window_charge.py, docs/privacy.md:
    F(u) = u − ℓ(u − E) + ℓ(−u − E) is concave on u ≥ 0). The proof's premises hold on the realised
    2^-32 grid — p₁ = ½ and q₂ = 1 − p₂ exactly, q₁ < ½, L_1 ≤ ε₁ — and, as a check of the algebra,
    L_r = F(r·s) and W(r) ≤ r·ε₁ up to r = 64 in every cell."""
    def softplus(x):
        return max(x, 0.0) + math.log1p(math.exp(-abs(x)))

    for eps, eps_inf in [(0.01, 0.5), (0.1, 2.0), (0.3, 6.0), (1.0, 3.0), (0.5, 10.0), (2.0, 3.0), (0.9, 1.0),
                         (4.0, 5.0), (0.2, 0.3), (0.05, 12.0), (7.0, 9.0)]:
        pr = server_half(spec("losue", d, eps, eps_inf, 1))
        par = pr.params
        assert par.p1 == 0.5 and par.q2 == 1.0 - par.p2 and 0.0 < par.q1 < 0.5 < par.p2
        s, e = math.log(par.p2 / par.q2), math.log((1 - par.q1) / par.q1)
        joint = [0.0] + [joint_epsilon(pr, j) for j in range(1, 65)]
        assert joint[1] <= pr.epsilon * (1 + 1e-12)
        for r in range(1, 65):
            f = r * s - softplus(r * s - e) + softplus(-r * s - e)
            assert joint[r] == pytest.approx(min(f, pr.epsilon_longitudinal), rel=1e-9, abs=1e-12), (d, eps, r)
        assert all(w <= k * pr.epsilon * (1 + 1e-9) for k, w in enumerate(_best_splits(joint)[1:], start=1)), \
            (d, eps, eps_inf)
        assert spec("losue", d, eps, eps_inf, 20).window_charges is None


def test_symmetric_memos_and_one_report_per_window_keep_epsilon_one_per_report():
    assert spec("dbitflip", 20, 1.0, 3.0, 10, sampled_buckets=2).window_charges is None
    assert spec("lgrr", 64, 0.01, 0.5, 1).window_charges is None
    rappor = parse_registry({"metrics": {"s": {"kind": "string", "protocol": "rappor",
                                              "reports_per_window": 10}}})
    assert rappor.get("s").window_charges is None
    assert spec("lgrr", 64, 0.01, 0.5, 10).window_charges is not None


def test_ten_lgrr_reports_in_a_window_are_charged_what_they_reveal():
    """The failing case of issue 27: the ledger charged 10 × 0.01 = 0.1 for what reveals 0.478."""
    s = spec("lgrr", 64, 0.01, 0.5, 10)
    book = Book()
    spends = []
    for i in range(12):
        assert apply(book, charge_of(s, "same"), noon(DAY, i)) is (None if i < 10 else Refusal.WINDOW)
        spends.append(book["m"].window_epsilon)
    exact = [window_epsilon(server_half(s), k) for k in range(1, 11)]
    assert spends[:10] == pytest.approx(exact, rel=1e-12)
    assert spends[9] == pytest.approx(0.4782, abs=5e-4) and spends[10] == spends[9]
    assert book["m"].lifetime_epsilon == pytest.approx(0.5)          # one value: ε∞ once
    apply(book, charge_of(s, "same", DAY + 1), noon(DAY + 1))        # a new window starts at C(1)
    assert book["m"].window_epsilon == pytest.approx(server_half(s).epsilon)


def test_the_device_window_cap_refuses_on_the_window_charge():
    s = spec("lgrr", 64, 0.01, 0.5, 10)
    cap = window_epsilon(server_half(s), 5) * (1 + 1e-12)           # room for 5 reports, not 10 × ε₁
    book = Book()
    outcomes = [apply(book, charge_of(s, "v", device_window=cap), noon(DAY, i)) for i in range(7)]
    assert outcomes == [None] * 5 + [Refusal.DEVICE_WINDOW] * 2
    assert book["m"].window_epsilon <= cap


def test_next_charge_never_leaves_the_window_below_c_of_n():
    """A re-dated window sums two days' spends (C(2) + C(2) < C(4)); a window begun under other
    parameters still pays C(n + 1) − C(n) for each new report."""
    charges = spec("lgrr", 64, 0.01, 0.5, 10).window_charges
    redated = charges.total(2) + charges.total(2)
    assert redated < charges.total(4)
    assert redated + next_charge(charges, 0.01, 4, redated) == pytest.approx(charges.total(5), rel=1e-15)
    big = 3.0                                 # spent at other parameters: the increments still apply
    assert next_charge(charges, 0.01, 4, big) == charges.total(5) - charges.total(4)
    assert next_charge(None, 0.25, 7, 99.0) == 0.25


def test_the_sdk_charges_its_window_through_the_client(tmp_path):
    cats = [f"v{i}" for i in range(64)]
    reg = parse_registry({"metrics": {"page": {"kind": "categorical", "categories": cats, "protocol": "lgrr",
                                               "epsilon": 0.01, "epsilon_inf": 0.5, "reports_per_window": 10}}})
    collector = FakeCollector(reg)
    client = TelemetryClient(registry=reg, state_dir=tmp_path / "s", transport=MemoryTransport(collector))
    try:
        sent = [client.report("page", "v3") for _ in range(11)]
        assert client.flush(5.0)
        acct = client.ledger_snapshot()["page"]
    finally:
        client.close()
    assert sent == [True] * 10 + [False]
    assert acct.window_epsilon == pytest.approx(window_epsilon(server_half(reg.get("page")), 10), rel=1e-12)


def test_the_encoder_block_publishes_the_charges_another_sdk_applies():
    s = spec("lgrr", 64, 0.01, 0.5, 10)
    block = s.to_json()["encoder"]["window_charges"]
    assert block == {"cumulative": list(s.window_charges.cumulative), "slope": s.window_charges.slope}
    assert len(block["cumulative"]) == 10
    assert "window_charges" not in spec("lgrr", 64, 0.01, 0.5, 1).to_json()["encoder"]
    assert cumulative_charges(server_half(s), 10) is s.window_charges     # computed once per parameters
