"""`ldpt audit`: the best attacker, played on the reports the SDK really sends (docs/privacy.md).

**Distinguishing game.** A device holds value A or B (a fair coin). The attacker sees T of its
reports — produced by the SDK's encoding path (``sdk_reports``: the protocol's
``encode_secret_one`` / ``encode_one`` with a fresh client secret, HMAC-memoised first rounds
and OS-CSPRNG coins, exactly what ``TelemetryClient.report`` queues) — knows every parameter,
the secret-derived cohort and the hash functions, and guesses by the likelihood ratio, the
optimal (Bayes) rule. ε-LDP caps its accuracy at e^ε/(1+e^ε) (Kairouz, Oh, Viswanath 2014),
where ε is what the ledger accounts for those T reports: T·ε₁ without memoisation and
min(T·ε₁, ε∞) with it. Turned around, an accuracy a proves ε >= ln(a/(1−a)): the empirical
lower bound printed beside the interval.

**Linkability game.** M devices share one value. Each has K earlier reports; a later report
of one of them arrives. Memoised responses make a device's reports alike, so the attacker
scores "same device" by the likelihood ratio P(earlier, later | same device) /
(P(earlier) P(later)); AUC is the chance it scores a true pair above a false one *within one
cohort* (what memoisation links), and "re-identified" is how often the best-scoring device is
the right one among all M, the permanent cohort (RAPPOR, LOLOHA) included.

Likelihoods. Every supported protocol is a *chain*: a first response a drawn from
P(a | x) (memoised: drawn once per device and value; otherwise a = x, or the hashed value),
then independent reports y_t ~ P(y | a). Two shapes cover them:

- categorical chains (rr, grr, olh, L-GRR, LOLOHA): a ∈ [k], P(y|a) = p₂ if y = a else q₂;
  log P(y₁..y_T | x) = logsumexp_a(log P(a|x) + C_a log p₂ + (T−C_a) log q₂), C_a = #{t: y_t = a};
- bit chains (oue, sue, L-OSUE, RAPPOR): bits independent, per bit i with r_i = P(a_i = 1 | x),
  s₁ = P(y_i = 1 | a_i = 1), s₀ = P(y_i = 1 | a_i = 0) and K_i ones among T reports:
  log Σ over a_i of the two binomial terms.

memobitmean (a memoised numeric mean, Ding et al. 2017) is a one-bit chain per grid point j
(memoised bit 1 w.p. P1_j, flipped w.p. γ every report); the grid point of a value depends on
the device's α, a secret the attacker does not know, so its likelihood is the mixture over the
two grid points around the value with the α-rounding probabilities (``grid_mixture``).
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any

import numpy as np
from scipy import stats
from scipy.special import logsumexp

from client_sdk.errors import LdptError
from client_sdk.protocols.device import Context
from client_sdk.registry import Kind, MetricSpec
from sketches import ServerHalf, server_half

#: Seconds per simulated day (the SDK's windows are UTC days; OLH re-derives its cohort daily).
DAY = 86_400
#: Confidence of the accuracy intervals.
CONFIDENCE = 0.95


class AuditError(LdptError):
    """The metric or the arguments cannot be audited."""

    status = 400
    type = "invalid-audit"


# --- the SDK's encoding path ---------------------------------------------------------------------

def supported(spec: MetricSpec) -> bool:
    """Whether the attacker has a likelihood for ``spec``'s protocol: its server half defines
    ``audit_chain`` (rr, grr, olh, oue, sue, rappor and the memoised ones), the one place it is said."""
    return type(server_half(spec)).audit_chain is not ServerHalf.audit_chain


def check_supported(spec: MetricSpec) -> None:
    """AuditError unless the audit's attacker has a likelihood for ``spec``'s protocol."""
    if not supported(spec):
        raise AuditError(f"it uses {spec.protocol}, for which the audit's attacker has no "
                         "likelihood (its server half defines no audit_chain); audit a metric of rr, grr, olh, "
                         "oue, sue, rappor or a memoised protocol")


def daily_cohorts(spec: MetricSpec) -> bool:
    """Whether a report's cohort in clear is re-derived every UTC day (OLH's, not permanent:
    ``cohort_permanent``): a device's reports are then independent, each of its own cohort's chain."""
    proto = server_half(spec)
    return proto.uses_cohorts and not proto.cohort_permanent


def linkable(spec: MetricSpec) -> bool:
    """Whether the linkability game (``link``) applies: it takes the cohort a report carries in
    clear as the device's for life (``cohort_permanent``); a cohort re-derived every UTC day (OLH's)
    carries nothing to link reports by across days."""
    return not daily_cohorts(spec)


def sdk_reports(spec: MetricSpec, secret: bytes, value: Any, count: int) -> list[Any]:
    """``count`` wire payloads of one device (``secret``) reporting ``value`` on consecutive UTC
    days 0, 1, ..., encoded as ``client_sdk.client.ClientCore._encode`` does: the device half's
    ``encode_one`` with the secret, the metric and the day (memoised rounds from the secret, OLH's
    cohort from the day, fresh coins from the OS CSPRNG)."""
    device = server_half(spec).device
    if spec.kind is Kind.STRING:
        key, idx = value, -1
    elif spec.is_mean:   # the grid point the device reports (memobitmean: α-rounded by its secret)
        key, idx = "", device.report_index(normalised(spec, value), secret, spec.name)
    else:
        key, idx = "", spec.indices([value])[0]
    return [device.encode_one(idx, key, Context(secret, spec.name, day)) for day in range(count)]


def normalised(spec: MetricSpec, value: Any) -> float:
    """A mean metric's value clipped to [lo, hi] and mapped to t in [−1, 1], as the SDK does."""
    lo, hi = spec.bounds
    x = min(hi, max(lo, float(value)))
    return (x - lo) * (2.0 / (hi - lo)) - 1.0


def audit_inputs(spec: MetricSpec, value: Any) -> list[tuple[float, Any]]:
    """(probability, chain input) over what a device holding ``value`` encodes, as far as the
    attacker knows: the server half's ``audit_inputs`` of the value as the chain takes it (a mean
    metric's normalised t, which memobitmean's secret α rounds to one of two grid points)."""
    x = normalised(spec, value) if spec.is_mean else value
    return server_half(spec).audit_inputs(x)


# --- likelihoods ------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Chain:
    """The first response's distribution for a value and the report model, for one device."""

    kind: str                   # "cat" or "bit"
    first: np.ndarray           # cat: P(a | x) over [k]; bit: r_i = P(a_i = 1 | x)
    one: float                  # cat: p₂ = P(y = a); bit: s₁ = P(y_i = 1 | a_i = 1)
    zero: float                 # cat: q₂ = P(y = b) for b ≠ a; bit: s₀ = P(y_i = 1 | a_i = 0)


def chain_for(spec: MetricSpec, value: Any, cohort: int | None) -> Chain:
    """The chain of one device (its cohort, if any) holding ``value``: its server half's
    ``audit_chain`` of the value's domain index (a histogram's bucket label too; a string metric's
    candidate and a mean metric's grid point as they are)."""
    proto = server_half(spec)
    x = value if spec.kind is Kind.STRING or spec.is_mean else spec.indices([value])[0]
    chain = proto.audit_chain(x, cohort)
    if chain is None:
        raise AuditError(f"no likelihood for {proto.name}")
    return Chain(*chain)


def _safe_log(x: np.ndarray | float) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(x)


def chain_loglik(chain: Chain, stats_: np.ndarray, total: int | np.ndarray) -> np.ndarray:
    """log P(reports | chain) from sufficient statistics: C_a counts (cat) or K_i ones (bit),
    ``stats_`` of shape (..., k), ``total`` = number of reports (broadcastable to ...)."""
    total = np.asarray(total, dtype=np.float64)[..., None]
    c = np.asarray(stats_, dtype=np.float64)
    if chain.kind == "cat":
        terms = _safe_log(chain.first) + c * math.log(chain.one) + (total - c) * _safe_log(chain.zero)
        return logsumexp(terms, axis=-1)
    one = _safe_log(chain.first) + c * _safe_log(chain.one) + (total - c) * _safe_log(1 - chain.one)
    zero = _safe_log(1 - chain.first) + c * _safe_log(chain.zero) + (total - c) * _safe_log(1 - chain.zero)
    return np.logaddexp(one, zero).sum(axis=-1)


def report_stats(spec: MetricSpec, wires: list[Any]) -> tuple[np.ndarray, np.ndarray | None]:
    """(per-report sufficient statistics (n, k) — one-hot y or the bit vector, the server half's
    ``report_statistics`` — and cohorts)."""
    proto = server_half(spec)
    payloads = proto.from_wire(wires)
    counts = proto.report_statistics(payloads)
    if counts is None:
        raise AuditError(f"no likelihood for {proto.name}")
    return counts, payloads.get("cohort")


# --- the distinguishing game --------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class DistinguishRow:
    reports: int
    epsilon: float              # what the ledger accounts for these reports
    bound: float                # e^ε/(1+e^ε)
    accuracy: float
    ci_low: float
    ci_high: float
    epsilon_lower_bound: float  # ln(a/(1−a)) at the interval's lower end (0 if <= ½)
    trials: int


def ledger_epsilon(spec: MetricSpec, reports: int) -> float:
    """ε the ledger accounts for ``reports`` reports of one value: T·ε₁, or min(T·ε₁, ε∞) memoised."""
    proto = server_half(spec)
    eps_inf = proto.epsilon_longitudinal
    total = reports * proto.epsilon
    return total if eps_inf is None else min(total, eps_inf)


def accuracy_interval(correct: int, trials: int) -> tuple[float, float]:
    """Clopper–Pearson interval of a success probability."""
    ci = stats.binomtest(correct, trials).proportion_ci(CONFIDENCE, method="exact")
    return float(ci.low), float(ci.high)


def _loglik_of_device(spec: MetricSpec, value: Any, wires: list[Any]) -> float:
    counts, cohorts = report_stats(spec, wires)
    if daily_cohorts(spec):   # a fresh cohort each day: independent reports, each with its own hashed value
        return float(sum(chain_loglik(chain_for(spec, value, int(s)), c, 1) for c, s in zip(counts, cohorts)))
    cohort = None if cohorts is None else int(cohorts[0])
    return float(likelihood(spec, value, {cohort})(cohort, counts.sum(axis=0), len(wires)))


def likelihood(spec: MetricSpec, value: Any, cohorts: set[int | None]):
    """``ll(cohort, stats, total)``: log P(reports of one device holding ``value``) — its cohort's
    chain, or the mixture of chains over the inputs its secret may make it encode (``audit_inputs``:
    memobitmean's two grid points around the value)."""
    mixture = audit_inputs(spec, value)
    if len(mixture) > 1:
        chains = {(c, x): chain_for(spec, x, c) for c in cohorts for _, x in mixture}

        def mixed(cohort: int | None, stats_: np.ndarray, total: int | np.ndarray) -> np.ndarray:
            return logsumexp([math.log(w) + chain_loglik(chains[cohort, x], stats_, total) for w, x in mixture],
                             axis=0)
        return mixed
    ((_, x),) = mixture
    chains1 = {c: chain_for(spec, x, c) for c in cohorts}

    def single(cohort: int | None, stats_: np.ndarray, total: int | np.ndarray) -> np.ndarray:
        return chain_loglik(chains1[cohort], stats_, total)
    return single


def distinguish(spec: MetricSpec, pair: tuple[Any, Any], reports: int, trials: int,
                rng: np.random.Generator) -> DistinguishRow:
    """Play the distinguishing game ``trials`` times with T = ``reports``."""
    check_supported(spec)
    correct = 0
    for _ in range(trials):
        bit = int(rng.integers(2))
        secret = os.urandom(32)   # a new device
        wires = sdk_reports(spec, secret, pair[bit], reports)
        ratio = _loglik_of_device(spec, pair[1], wires) - _loglik_of_device(spec, pair[0], wires)
        guess = int(ratio > 0) if ratio != 0 else int(rng.integers(2))
        correct += guess == bit
    eps = ledger_epsilon(spec, reports)
    low, high = accuracy_interval(correct, trials)
    lower = math.log(low / (1 - low)) if low > 0.5 else 0.0
    return DistinguishRow(reports, eps, math.exp(eps) / (1 + math.exp(eps)), correct / trials, low, high,
                          lower, trials)


# --- the linkability game ---------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class LinkRow:
    protocol: str
    epsilon: float
    epsilon_inf: float | None
    history: int
    devices: int
    auc: float
    reidentified: float


def auc_from_scores(same: np.ndarray, different: np.ndarray) -> float:
    """P(score of a true pair > a false one), ties counting half (Mann–Whitney)."""
    allv = np.concatenate([same, different])
    ranks = stats.rankdata(allv)
    r_same = ranks[:same.shape[0]].sum()
    n1, n0 = same.shape[0], different.shape[0]
    return float((r_same - n1 * (n1 + 1) / 2) / (n1 * n0))


def link(spec: MetricSpec, value: Any, history: int, devices: int) -> LinkRow:
    """Play the linkability game: ``devices`` devices share ``value``; each sends ``history``
    earlier reports and one later one (SDK path). Scores every (earlier, later) pair."""
    check_supported(spec)
    proto = server_half(spec)
    if not linkable(spec):
        raise AuditError(f"{proto.name} re-derives its cohort daily: its reports carry nothing to link by")
    hist, later, cohorts = [], [], []
    for _ in range(devices):
        wires = sdk_reports(spec, os.urandom(32), value, history + 1)
        counts, coh = report_stats(spec, wires)
        hist.append(counts[:history].sum(axis=0))
        later.append(counts[history])
        cohorts.append(None if coh is None else int(coh[0]))
    hist_arr, later_arr = np.array(hist), np.array(later)
    score = np.empty((devices, devices))
    ll = likelihood(spec, value, set(cohorts))
    base_hist = np.array([ll(cohorts[i], hist_arr[i], history) for i in range(devices)])
    base_later = np.array([ll(cohorts[j], later_arr[j], 1) for j in range(devices)])
    for i in range(devices):   # rows: the earlier reports of device i against every later report
        joint = ll(cohorts[i], hist_arr[i][None, :] + later_arr, history + 1)
        # a later report from another cohort cannot come from device i (cohorts are permanent)
        other = np.array([c != cohorts[i] for c in cohorts])
        score[i] = np.where(other, -np.inf, joint - base_hist[i] - base_later)
    # AUC over pairs within one cohort: what the memoised responses (not the cohort) link
    coh = np.array([-1 if c is None else c for c in cohorts])
    same_cohort = (coh[:, None] == coh[None, :]) & ~np.eye(devices, dtype=bool)
    auc = auc_from_scores(np.diag(score), score[same_cohort]) if same_cohort.any() else math.nan
    top = score.max(axis=0)   # per later report: the best-scoring devices (ties split evenly)
    ties = (score == top).sum(axis=0)
    reid = float(np.mean((np.diag(score) == top) / ties))
    return LinkRow(proto.name, proto.epsilon, proto.epsilon_longitudinal, history, devices, auc, reid)


__all__ = ["AuditError", "DistinguishRow", "LinkRow", "accuracy_interval", "chain_for",
           "chain_loglik", "distinguish", "ledger_epsilon", "link", "linkable", "sdk_reports", "supported"]


def comparison_specs(spec: MetricSpec) -> list[MetricSpec]:
    """The metric itself, then the memoised protocols at its (d, ε₁, ε∞) when it has ε∞, then
    RAPPOR with its default options: the rows of the linkability table."""
    from client_sdk.protocols import LONGITUDINAL_PROTOCOL_NAMES
    from client_sdk.registry import parse_metric

    out = [spec]
    if spec.epsilon_inf is not None and spec.domain is not None:
        for name in LONGITUDINAL_PROTOCOL_NAMES:
            if name == spec.protocol:
                continue
            table = {"kind": spec.kind.value, "protocol": name, "epsilon": spec.epsilon,
                     "epsilon_inf": spec.epsilon_inf}
            if spec.kind is Kind.CATEGORICAL:
                table["categories"] = list(spec.categories or ())
            try:
                out.append(parse_metric(f"{spec.name}.{name}", table))
            except LdptError:
                continue   # e.g. a domain too large for loloha's decoder
    baseline = parse_metric("rappor-default", {"kind": "string"})   # auto: RAPPOR's defaults
    if baseline.protocol != spec.protocol:
        out.append(baseline)
    return out
