"""RAPPOR decoding: frequencies of candidate strings from a sketch, with honest errors.

Model (docs/math.md §7). In cohort j with Nⱼ reports, the unbiased true-bit count of Bloom
bit i is t̂ᵢⱼ = (cᵢⱼ − p*Nⱼ)/(q* − p*), and the bit proportion Yᵢⱼ = t̂ᵢⱼ/Nⱼ satisfies

    E[Y] = X π + b·1,   X ∈ {0,1}^{km×M}, X[(j,i), s] = 1 iff candidate s sets bit i in cohort j,

π the candidates' proportions and b the bit rate of strings outside the model (a string
sets ≈ h̄ of k bits, so b ≈ mass·h̄/k on average: a uniform "background" column). We estimate
(π, b) by weighted least squares, which is unbiased whatever the weights, and compute the
variance exactly from the per-cell variances (sandwich), so the intervals are honest:

1.  Cells. Dᵢⱼ = [ρ q*(1−q*) + (1−ρ) p*(1−p*)] / (Nⱼ (q*−p*)²) is the randomised-response
    variance of Yᵢⱼ, evaluated at the cell's own ρ = clip(Yᵢⱼ, 0, 1) (it is linear in ρ, so
    unbiased up to the clip). Weights wᵢⱼ = Nⱼ (q*−p*)² / [ρ̄ⱼ q*(1−q*) + (1−ρ̄ⱼ) p*(1−p*)] use
    the cohort-average ρ̄ⱼ, so a weight never depends on its own cell's noise (which would bias
    the fit). Cohorts without reports are dropped.
2.  Fit. With G = XᵀWX: π̂ = G⁻¹XᵀWY, Var_RR(π̂) = diag(A D Aᵀ), A = G⁻¹XᵀW (computed in
    row blocks). Values are drawn from the population, which adds the multinomial sampling
    variance ≈ π(1−π)/n of each proportion (exact when cohorts are balanced); it is added
    at π̂⁺ = clip(π̂, 0, 1). Relative to the sample's own proportions this is conservative.
3.  Many candidates. The fit needs X to have full column rank; we fit every candidate at
    once when M ≤ rows/4 (rows = k·(cohorts with reports)). Otherwise we *screen*: a model
    set S of the candidates with z > SCREEN_Z (at most rows/4), chosen by marginal scores and
    refined by refitting on S and rescoring everyone against the residual (a few rounds).
    Then each candidate's estimate is its coefficient in the model S ∪ {itself}
    (Frisch–Waugh–Lovell: for s ∈ S the WLS coefficient, for u ∉ S the added-variable
    estimate x̃ᵤᵀWr / x̃ᵤᵀWx̃ᵤ with x̃ᵤ = xᵤ partialled on S and r the residual). Every
    candidate therefore gets the same kind of estimate whether or not it was selected — no
    candidate is zeroed or shrunk by selection, which is what keeps the coverage. SCREEN_Z is
    high because decoys selected on noise inflate each other through the shared background.
4.  Tests. p = P(Z > π̂/SE₀) one-sided (proportions are >= 0), SE₀ the randomised-response
    standard error (the sampling term is 0 under "π = 0"). ``control="fwer"`` (default):
    Holm's step-down at level α over all M candidates (family-wise error <= α);
    ``control="fdr"``: Benjamini–Hochberg at level α (expected share of false discoveries
    among detections <= α, under independence or positive dependence).
5.  Checks and collision noise. χ² = Σ r²/V over cells (V the cell's total variance under
    the fit) against χ²(rows − |S|): below GOF_WARNING_P the summary warns that the
    candidates do not explain the data (a frequent string missing from the list). Strings
    outside the model also collide with candidates through frozen hashes; the χ² excess
    estimates their Σπ², and the variance of that collision bias over hash draws, Σπ²/(m·k),
    is added to every candidate's variance (``_goodness_of_fit``). The background b gives
    the mass outside the model, tested one-sided against 0.
6.  Intervals. Undetected candidates get Wald intervals on counts (estimators.intervals),
    clipped to [0, n]. A detected candidate was *selected* because its estimate passed the
    threshold a = c·SE₀ (c the test's critical z at the final step: Holm α/(M−R+1), BH αR/M,
    for R detections), and Wald intervals of selected estimates undercover (winner's curse:
    ~0.85–0.9 for the borderline ones). Its interval is therefore the selective one: the
    values μ for which the observed estimate is within the central ``confidence`` of
    N(μ, SE²) truncated to (a, ∞) (inverted by bisection, vectorised), so intervals of the
    detected list cover at the nominal rate. It reduces to the Wald interval far above the
    threshold; just above it, it widens downwards (and may end below the estimate).
    ``simultaneous=True`` gives Bonferroni Wald intervals over all M candidates instead,
    which hold simultaneously and so after any selection.
7.  The decoded distribution (estimators.rappor_shares): empirical-Bayes posterior medians
    of the proportions (minimising expected total variation, free of the winner's curse) on a
    support whose false strings are at most ``support_alpha`` per absent candidate, with
    intervals conditional on being reported: the ``share`` columns. The background's
    variance is the larger of the model-based one (plus population sampling) and a grouped
    jackknife over cohorts, so the outside-the-list mass is calibrated on real reports.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import scipy.linalg
from scipy import sparse, stats

from client_sdk.errors import EstimationError
from client_sdk.protocols.rappor import Rappor, RapporParams
from sketches.base import Sketch
from sketches.hashing import bloom_positions
from sketches.rappor import RapporServer

from .intervals import wald_interval, z_value
from .multiple_testing import check_control, detect, last_step_level
from .rappor_shares import SUPPORT_ALPHA, decoded_shares, selective_interval

COLUMNS = ["value", "estimate", "proportion", "std_err", "ci_low", "ci_high", "p_value", "detected",
           "share", "share_low", "share_high", "reported"]
#: Scale of each numeric column (also in ``df.attrs["units"]``): counts are numbers of reports.
UNITS = {"estimate": "count", "proportion": "proportion", "std_err": "count", "ci_low": "count",
         "ci_high": "count", "p_value": "probability", "share": "proportion", "share_low": "proportion",
         "share_high": "proportion"}
#: Candidates with a screening z-score above this enter the model set S (many-candidate mode).
SCREEN_Z = 4.0
#: Fit all candidates at once while M <= rows / ROWS_PER_CANDIDATE; screen beyond.
ROWS_PER_CANDIDATE = 4
SCREEN_ROUNDS = 4
#: Goodness-of-fit p-value below which the summary warns that candidates miss mass.
GOF_WARNING_P = 1e-3
#: Grouped jackknife of the background (outside-the-list mass): groups of cohorts, and the
#: largest model (columns) it refits.
JACKKNIFE_GROUPS = 16
JACKKNIFE_MAX_MODEL = 600
#: Rows of A = G⁻¹XᵀW (or columns of the added-variable solve) per block: bounds memory.
BLOCK = 512


@dataclasses.dataclass(frozen=True)
class CandidateMap:
    """Candidate strings and their Bloom bits: ``design`` is the (m·k) × M 0/1 matrix X.

    Built from strings with our hash (``from_strings``) or from google/rappor's map file
    (estimators.rappor_io), whose bit positions are used as given.
    """

    values: tuple[str, ...]
    design: sparse.csc_matrix
    positions: np.ndarray | None = None  # (M, m, h) bits per cohort and hash, when hashed here

    @classmethod
    def from_strings(cls, values: Sequence[str], params: RapporParams) -> CandidateMap:
        """Hash candidates with the client's Bloom hash (client_sdk.hashing)."""
        vals = tuple(values)
        bad = next((v for v in vals if not isinstance(v, str)), None)
        if bad is not None:
            raise EstimationError(f"candidates must be strings, got {bad!r}")
        positions = bloom_positions(vals, params.k, params.h, params.m)
        return cls(vals, design_from_positions(positions, params.k), positions)

    @classmethod
    def from_rows(cls, values: Sequence[str], rows: Sequence[np.ndarray], n_rows: int) -> CandidateMap:
        """From 0-based design rows c·k + bit per candidate (duplicates allowed; they count once)."""
        lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
        flat = np.concatenate([np.asarray(r, dtype=np.int64) for r in rows]) if len(rows) else \
            np.zeros(0, dtype=np.int64)
        cols = np.repeat(np.arange(len(rows)), lengths)
        return cls(tuple(values), _binary_csc(flat, cols, n_rows, len(rows)))

    def __len__(self) -> int:
        return len(self.values)


def _binary_csc(rows: np.ndarray, cols: np.ndarray, n_rows: int, n_cols: int) -> sparse.csc_matrix:
    mat = sparse.coo_matrix((np.ones(rows.shape[0]), (rows, cols)), shape=(n_rows, n_cols)).tocsc()
    mat.sum_duplicates()
    mat.data[:] = 1.0  # a bit set twice by one candidate (hash collision) is set once
    return mat


def design_from_positions(positions: np.ndarray, k: int) -> sparse.csc_matrix:
    """X from Bloom positions (M, m, h): row c·k + bit, one column per candidate."""
    n_cand, m, h = positions.shape
    rows = (np.arange(m)[None, :, None] * k + positions).reshape(-1)
    cols = np.repeat(np.arange(n_cand), m * h)
    return _binary_csc(rows, cols, m * k, n_cand)


def sample_sketch(params: RapporParams, candidates: CandidateMap, proportions: np.ndarray, n: int,
                  rng: np.random.Generator) -> Sketch:
    """A sketch of n reports drawn from the exact per-bit model (benchmarks and tests).

    Cohort sizes are multinomial; in cohort j bit i is set in a report with probability
    λᵢⱼ = p* + (q*−p*)ρᵢⱼ, ρ = Xπ (π = ``proportions``, summing to at most 1), so
    cᵢⱼ ~ Binomial(Nⱼ, λᵢⱼ). This is the distribution of one report per client whose value is
    drawn from π (bits of one report are treated as independent given π: a fast stand-in for
    encoding every report, with the same per-cell means and variances).
    """
    pi = np.asarray(proportions, dtype=np.float64)
    if pi.shape != (len(candidates),) or (pi < 0).any() or pi.sum() > 1 + 1e-9:
        raise ValueError("proportions must be one non-negative number per candidate, summing to <= 1")
    m, k = params.m, params.k
    reports = rng.multinomial(n, np.full(m, 1.0 / m))
    rho = np.clip((candidates.design @ pi).reshape(m, k), 0.0, 1.0)
    lam = params.p_star + (params.q_star - params.p_star) * rho
    return Sketch(rng.binomial(reports[:, None], lam).astype(np.int64), reports.astype(np.int64))


def params_of(params_or_protocol: RapporParams | Rappor | RapporServer) -> RapporParams:
    """RAPPOR's params, given them or either half of the protocol (whose ``params`` they are)."""
    params = getattr(params_or_protocol, "params", params_or_protocol)
    if isinstance(params, RapporParams):
        return params
    raise EstimationError(f"expected RAPPOR params or protocol, got {type(params_or_protocol).__name__}")


def check_sketch(sketch: Sketch, params: RapporParams) -> None:
    """Shape and sanity of a RAPPOR sketch (EstimationError naming what is wrong)."""
    counts, reports = np.asarray(sketch.counts), np.asarray(sketch.reports)
    if counts.shape != (params.m, params.k) or reports.shape != (params.m,):
        raise EstimationError(f"sketch has shape {counts.shape} / {reports.shape}, expected "
                              f"({params.m}, {params.k}) / ({params.m},) for m={params.m}, k={params.k}")
    if (counts < 0).any() or (reports < 0).any():
        raise EstimationError("sketch has negative counts")
    if (counts > reports[:, None]).any():
        j = int(np.flatnonzero((counts > reports[:, None]).any(axis=1))[0])
        raise EstimationError(f"cohort {j}: a bit count exceeds the cohort's {int(reports[j])} reports")
    if reports.sum() <= 0:
        raise EstimationError("the sketch has no reports")


# --- the linear algebra --------------------------------------------------------------------------

@dataclasses.dataclass
class _Cells:
    """The regression data over cells of cohorts with reports."""

    y: np.ndarray        # Y = t̂/N
    d: np.ndarray        # randomised-response variance of Y per cell
    w: np.ndarray        # weights (cohort-level, see module docstring)
    n_cohort: np.ndarray  # N of the cell's cohort
    x: sparse.csc_matrix  # design rows of these cells, plus a last column of ones (intercept)


def _cells(sketch: Sketch, params: RapporParams, design: sparse.csc_matrix) -> _Cells:
    k = params.k
    counts = np.asarray(sketch.counts, dtype=np.float64)
    reports = np.asarray(sketch.reports, dtype=np.float64)
    ps, qs = params.p_star, params.q_star
    delta = qs - ps
    vz, vo = ps * (1 - ps), qs * (1 - qs)   # per-report Bernoulli variance for a true 0 / 1
    live = np.flatnonzero(reports > 0)
    n = reports[live][:, None]
    y = (counts[live] - ps * n) / delta / n                       # t̂/N per (cohort, bit)
    rho = np.clip(y, 0.0, 1.0)
    d = (rho * vo + (1 - rho) * vz) / (n * delta**2)
    rho_bar = np.clip(y.mean(axis=1, keepdims=True), 0.0, 1.0)
    w = np.broadcast_to(n * delta**2 / (rho_bar * vo + (1 - rho_bar) * vz), y.shape)
    rows = (live[:, None] * k + np.arange(k)).reshape(-1)
    x = design.tocsr()[rows] if live.shape[0] < params.m else design
    x = sparse.hstack([x, np.ones((rows.shape[0], 1))], format="csc")   # + intercept column
    return _Cells(y.reshape(-1), d.reshape(-1), np.ascontiguousarray(w).reshape(-1),
                  np.broadcast_to(n, y.shape).reshape(-1), x)


def _factor(g: np.ndarray) -> tuple[Any, bool]:
    """Cholesky of G (lower), or an eigen-pseudo-inverse when G is singular (flagged)."""
    try:
        return scipy.linalg.cho_factor(g, lower=True, check_finite=False), True
    except np.linalg.LinAlgError:
        vals, vecs = np.linalg.eigh(g)
        keep = vals > vals.max() * 1e-10
        return (vecs[:, keep] / vals[keep]) @ vecs[:, keep].T, False


def _solve(factor: Any, ok: bool, rhs: np.ndarray) -> np.ndarray:
    return scipy.linalg.cho_solve(factor, rhs, check_finite=False) if ok else factor @ rhs


@dataclasses.dataclass
class _Fit:
    beta: np.ndarray         # coefficients of the model set S
    var_rr: np.ndarray       # sandwich randomised-response variance of beta
    resid: np.ndarray        # Y − X_S beta
    factor: Any
    full_rank: bool
    xtw: sparse.csr_matrix    # X_Sᵀ W


def _fit(cells: _Cells, cols: np.ndarray, sandwich: bool = True) -> _Fit:
    xs = cells.x[:, cols]
    xtw = sparse.csr_matrix(xs.T.multiply(cells.w[None, :]))
    g = (xtw @ xs).toarray()
    factor, ok = _factor(g)
    beta = _solve(factor, ok, xtw @ cells.y)
    resid = cells.y - xs @ beta
    if sandwich:
        # Var = diag(A D Aᵀ) with A = G⁻¹XᵀW, in blocks of rows of G⁻¹.
        g_inv = _solve(factor, ok, np.eye(g.shape[0]))
        var = np.empty(g.shape[0])
        xtw_t = xtw.T.tocsr()
        for start in range(0, g.shape[0], BLOCK):
            a = (xtw_t @ g_inv[start:start + BLOCK].T).T       # block of A, dense
            var[start:start + BLOCK] = (a * a) @ cells.d
    else:  # model-based: diag(G⁻¹) (screening only)
        var = np.diag(_solve(factor, ok, np.eye(g.shape[0]))).copy()
    return _Fit(beta, var, resid, factor, ok, xtw)


def _added_variable(cells: _Cells, fit: _Fit, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Estimate and variance of each column u in ``cols`` as its coefficient in S ∪ {u}.

    x̃ = x − X_S G⁻¹ X_SᵀW x;  estimate = xᵀW r / x̃ᵀW x̃ (r is already W-orthogonal to X_S);
    x̃ᵀWx̃ = xᵀWx − bᵀG⁻¹b with b = X_SᵀWx. Variance: model-based 1/x̃ᵀWx̃ times the cell
    meat/bread ratio Σw²D x / Σw x of the raw column (1 when W = D⁻¹; here within a few %).
    """
    xu = cells.x[:, cols]
    xtx = xu.T @ cells.w                          # xᵀWx (X is 0/1)
    num = xu.T @ (cells.w * fit.resid)
    meat = xu.T @ (cells.w**2 * cells.d)
    quad = np.empty(len(cols))
    for start in range(0, len(cols), BLOCK):
        b = (fit.xtw @ xu[:, start:start + BLOCK]).toarray()
        if fit.full_rank:
            z = scipy.linalg.solve_triangular(fit.factor[0], b, lower=True, check_finite=False)
            quad[start:start + BLOCK] = (z * z).sum(axis=0)
        else:
            quad[start:start + BLOCK] = (b * (fit.factor @ b)).sum(axis=0)
    den = np.maximum(xtx - quad, xtx * 1e-12)
    with np.errstate(divide="ignore", invalid="ignore"):
        return num / den, (meat / np.where(xtx > 0, xtx, 1.0)) / den


def _screen(cells: _Cells, candidates: np.ndarray, intercept: int, cap: int) -> np.ndarray:
    """Model set S (candidate columns with z > SCREEN_Z, at most ``cap``), plus the intercept.

    Round 0 scores every candidate against the intercept-only residual; each later round
    refits on S and rescores: members by their coefficient's z, the others by their score
    against the residual, xᵀWr / √(xᵀWx − (xᵀW1)²/1ᵀW1) (partialled on the intercept only —
    cheap and close, since S is a small part of the rows).
    """
    x = cells.x[:, candidates]
    xtx = x.T @ cells.w
    xt1 = xtx.copy()  # X is 0/1, so xᵀW1 = xᵀWx
    denom = np.sqrt(np.maximum(xtx - xt1**2 / cells.w.sum(), 1e-300))
    chosen: np.ndarray | None = None
    fit = _fit(cells, np.array([intercept]), sandwich=False)
    z = (x.T @ (cells.w * fit.resid)) / denom
    for _ in range(SCREEN_ROUNDS):
        order = np.argsort(-z, kind="stable")[:cap]
        new = np.sort(order[z[order] > SCREEN_Z])
        if chosen is not None and np.array_equal(new, chosen):
            break
        chosen = new
        fit = _fit(cells, np.append(candidates[chosen], intercept), sandwich=False)
        z = (x.T @ (cells.w * fit.resid)) / denom
        z[chosen] = fit.beta[:-1] / np.sqrt(np.maximum(fit.var_rr[:-1], 1e-300))
    assert chosen is not None
    return np.append(candidates[chosen], intercept)


def _aliases(x: sparse.csc_matrix) -> np.ndarray:
    """For each column, the first column with exactly the same rows (itself if unique)."""
    rng = np.random.default_rng(0x5EED)
    sig = x.T @ rng.random((x.shape[0], 2))
    _, first, inverse = np.unique(sig, axis=0, return_index=True, return_inverse=True)
    return first[inverse.reshape(-1)]


def decode(sketch: Sketch, params_or_protocol: RapporParams | Rappor | RapporServer,
           candidates: Sequence[str] | CandidateMap, *, confidence: float = 0.95,
           control: str = "fwer", alpha: float = 0.05, simultaneous: bool = False,
           support_alpha: float = SUPPORT_ALPHA) -> pd.DataFrame:
    """Estimate each candidate's frequency: unbiased estimates, tests and the decoded distribution.

    Columns: ``estimate`` (count), ``proportion``, ``std_err``, ``ci_low``, ``ci_high`` (counts)
    and ``p_value`` of the unbiased estimate; ``detected`` by ``control`` at ``alpha``; and the
    decoded distribution (estimators.rappor_shares): ``share`` (proportion, 0 when not
    reported), its interval ``share_low``/``share_high`` (proportions) and ``reported``.
    Rows are sorted by estimate (largest first). ``df.attrs``: protocol, epsilon
    (ε₁), epsilon_longitudinal, n_reports, confidence, simultaneous, control, alpha,
    support_alpha, z, ``units`` (each numeric column's scale) and ``summary`` (docs/rappor.md).
    """
    params = params_of(params_or_protocol)
    if not 0 < confidence < 1:
        raise EstimationError(f"confidence must be between 0 and 1 (exclusive), got {confidence}")
    check_control(control)
    if not 0 < alpha < 1:
        raise EstimationError(f"alpha must be between 0 and 1 (exclusive), got {alpha}")
    if not 0 < support_alpha < 1:
        raise EstimationError(f"support_alpha must be between 0 and 1 (exclusive), got {support_alpha}")
    check_sketch(sketch, params)
    cmap = candidates if isinstance(candidates, CandidateMap) else _candidate_map(candidates, params)
    if len(cmap) == 0:
        raise EstimationError("no candidate strings to decode against")
    if cmap.design.shape[0] != params.m * params.k:
        raise EstimationError(f"candidate map has {cmap.design.shape[0]} rows, expected m·k = "
                              f"{params.m * params.k}")

    n = sketch.total_reports
    cells = _cells(sketch, params, cmap.design)
    n_rows, m_cand = cells.x.shape[0], cells.x.shape[1] - 1
    intercept = m_cand                                     # last column: uniform background
    alias = _aliases(cells.x[:, :m_cand])
    unique = np.flatnonzero(alias == np.arange(m_cand))
    empty = np.asarray((cells.x[:, :m_cand] != 0).sum(axis=0)).reshape(-1) == 0  # no live bit
    fit_cols = unique[~empty[unique]]
    cap = max(1, n_rows // ROWS_PER_CANDIDATE)
    screened = fit_cols.shape[0] + 1 > cap
    model = _screen(cells, fit_cols, intercept, cap) if screened else np.append(fit_cols, intercept)
    fit = _fit(cells, model)
    est = np.full(m_cand + 1, np.nan)
    var_rr = np.full(m_cand + 1, np.nan)
    est[model], var_rr[model] = fit.beta, fit.var_rr
    others = np.setdiff1d(fit_cols, model, assume_unique=True)
    if others.size:
        est[others], var_rr[others] = _added_variable(cells, fit, others)
    background = (float(est[intercept]),
                  max(float(var_rr[intercept]) + _background_sampling_variance(cells, fit, model, params.k),
                      _background_jackknife_variance(cells, model, params.k)))
    est, var_rr = est[:m_cand], var_rr[:m_cand]

    gof = _goodness_of_fit(cells, fit, params, model.shape[0])
    # population sampling variance of a proportion, at the clipped estimate (module docstring, 2),
    # and the frozen-collision variance of strings outside the model (module docstring, 5);
    # both are 0 under "π = 0" except the collision term, so SE₀ keeps only that one
    clipped = np.clip(est, 0.0, 1.0)
    var_rr = var_rr + gof["collision_variance"]
    var = var_rr + clipped * (1 - clipped) / n
    se0 = np.sqrt(var_rr)
    with np.errstate(divide="ignore", invalid="ignore"):
        p_value = stats.norm.sf(est / se0)
    testable = np.isfinite(p_value)
    detected = np.zeros(m_cand, dtype=bool)
    p_for_tests = np.where(testable, p_value, 1.0)
    detected[:] = detect(p_for_tests, alpha, control)
    detected &= testable

    counts, count_var = est * n, var * float(n) ** 2
    low, high = wald_interval(np.nan_to_num(counts), np.nan_to_num(count_var), n, confidence, simultaneous)
    if detected.any() and not simultaneous:  # module docstring, 6
        n_det, n_tests = int(detected.sum()), m_cand
        level = last_step_level(n_det, n_tests, alpha, control)
        threshold = stats.norm.isf(level) * se0[detected]
        sel_low, sel_high = selective_interval(est[detected], np.sqrt(var[detected]), threshold, confidence)
        low[detected] = np.clip(sel_low, 0.0, 1.0) * n
        high[detected] = np.clip(sel_high, 0.0, 1.0) * n
    low[~np.isfinite(counts)] = np.nan
    high[~np.isfinite(counts)] = np.nan
    shares = decoded_shares(est, se0, np.sqrt(var), p_value, confidence, support_alpha)
    df = pd.DataFrame({"value": list(cmap.values), "estimate": counts, "proportion": est,
                       "std_err": np.sqrt(count_var), "ci_low": low, "ci_high": high,
                       "p_value": p_value, "detected": detected, "share": shares.share,
                       "share_low": shares.low, "share_high": shares.high, "reported": shares.reported},
                      columns=COLUMNS)
    order = np.lexsort((np.arange(m_cand), -np.nan_to_num(est, nan=-np.inf)))
    df = df.iloc[order].reset_index(drop=True)

    summary = _summary(gof, fit, model, params, n, est, detected, alias, empty, screened, control, alpha,
                       background)
    summary.update(reported=int(shares.reported.sum()), reported_mass=float(shares.share.sum()),
                   support_alpha=support_alpha, absent_share=shares.null_weight)
    df.attrs.update(protocol="rappor", epsilon=params.epsilon_one,
                    epsilon_longitudinal=params.epsilon_inf, n_reports=n, confidence=confidence,
                    simultaneous=simultaneous, post_processed=None, control=control, alpha=alpha,
                    support_alpha=support_alpha, z=z_value(confidence, m_cand if simultaneous else 1),
                    units=dict(UNITS), summary=summary)
    return df


def _background_sampling_variance(cells: _Cells, fit: _Fit, model: np.ndarray, k: int) -> float:
    """Variance the population sampling adds to the background coefficient b̂ (docs/rappor.md).

    b̂ = aᵀY with a the intercept's row of A = G⁻¹XᵀW. Given the values drawn, cohort j holds
    proportions pⱼ of the model's strings, multinomial with covariance (diag π − ππᵀ)/Nⱼ, and
    E[Y | p] moves by X pⱼ in its cells; so Var = Σⱼ [Σₛ πₛ Uₛⱼ² − (Σₛ πₛ Uₛⱼ)²]/Nⱼ with
    Uₛⱼ = Σ over cohort j's cells of a·xₛ, at π = clip(β̂, 0, 1). Every cohort's proportions sum
    to 1, so this noise does not average out of the intercept the way it does of a candidate's
    own coefficient; without it the outside mass's interval is too narrow on real reports.
    """
    if model.shape[0] < 2:
        return 0.0
    unit = np.zeros(model.shape[0])
    unit[-1] = 1.0
    a = fit.xtw.T @ _solve(fit.factor, fit.full_rank, unit)        # the intercept's row of A
    n_cells = cells.y.shape[0]
    cohort = sparse.csr_matrix((np.ones(n_cells), (np.arange(n_cells), np.arange(n_cells) // k)),
                               shape=(n_cells, n_cells // k))
    u = sparse.csr_matrix(cells.x[:, model[:-1]].T.multiply(a[None, :])) @ cohort   # S × cohorts
    pi = np.clip(fit.beta[:-1], 0.0, 1.0)
    first = np.asarray(u.multiply(u).T @ pi).reshape(-1)
    second = np.asarray(u.T @ pi).reshape(-1) ** 2
    n_cohort = cells.n_cohort[::k]
    return float(np.sum(np.maximum(first - second, 0.0) / n_cohort))


def _background_jackknife_variance(cells: _Cells, model: np.ndarray, k: int) -> float:
    """Delete-a-group jackknife variance of b̂ over JACKKNIFE_GROUPS groups of cohorts (0 if not run).

    Cohorts are independent samples of reports, so refitting without each group in turn
    measures b̂'s variance whatever its source (Efron and Stein, 1981; grouped jackknife), with
    no model of within-cohort dependence; decode uses the larger of this and the model-based
    variance, so the outside-the-list interval is not too narrow on real reports. Skipped for
    large models (each group is a refit) or fewer than JACKKNIFE_GROUPS cohorts with reports.
    """
    n_live = cells.y.shape[0] // k
    if n_live < JACKKNIFE_GROUPS or model.shape[0] > JACKKNIFE_MAX_MODEL:
        return 0.0
    group_of_cell = (np.arange(cells.y.shape[0]) // k) % JACKKNIFE_GROUPS
    b = np.empty(JACKKNIFE_GROUPS)
    for g in range(JACKKNIFE_GROUPS):
        keep = group_of_cell != g
        sub = _Cells(cells.y[keep], cells.d[keep], cells.w[keep], cells.n_cohort[keep], cells.x[keep])
        b[g] = _fit(sub, model, sandwich=False).beta[-1]
    return float((JACKKNIFE_GROUPS - 1) / JACKKNIFE_GROUPS * ((b - b.mean()) ** 2).sum())


def _candidate_map(candidates: Sequence[str], params: RapporParams) -> CandidateMap:
    values = list(candidates)
    seen: set[str] = set()
    for v in values:
        if v in seen:
            raise EstimationError(f"candidate {v!r} is listed twice")
        seen.add(v)
    return CandidateMap.from_strings(values, params)


def _goodness_of_fit(cells: _Cells, fit: _Fit, params: RapporParams, model_size: int) -> dict[str, float]:
    """χ² of the model fit, explained variance, and the collision variance it implies.

    V is each cell's variance under the fit (randomised response + sampling). Strings outside
    the model (mass π_v) leave structure in the residual: Σ_c r_c²/V_c exceeds its degrees of
    freedom by ≈ Σ_v π_v² · m·h̄(1 − h̄/k) · mean(1/V), h̄ = k(1 − (1 − 1/k)^h) their distinct
    bits per cohort. Their frozen hash collisions with a candidate shift its estimate by
    ≈ Σ_v π_v (s_uv − E s_uv)/(m h̄) (s_uv shared cells, ≈ Poisson), which over hash draws has
    variance Σ_v π_v² / (m·k): added to every candidate's variance (method of moments,
    clipped at 0; it is ≈ 0 when the candidates explain the data).
    """
    n_rows = cells.y.shape[0]
    m_live = n_rows // params.k
    delta = params.q_star - params.p_star
    rho = np.clip(cells.y - fit.resid, 0.0, 1.0)
    vz, vo = params.p_star * (1 - params.p_star), params.q_star * (1 - params.q_star)
    v = (rho * vo + (1 - rho) * vz) / (cells.n_cohort * delta**2) + rho * (1 - rho) / cells.n_cohort
    chi2 = float((fit.resid**2 / v).sum())
    dof = max(1, n_rows - model_size)
    signal = float((cells.y**2 / v).sum()) - n_rows
    explained = float(np.clip(1 - max(0.0, chi2 - dof) / signal, 0.0, 1.0)) if signal > 0 else math.nan
    bits = params.k * (1 - (1 - 1 / params.k) ** params.h)           # h̄
    scale = m_live * bits * (1 - bits / params.k) * float(np.mean(1 / v))
    sum_sq = max(0.0, chi2 - dof) / scale if scale > 0 else 0.0     # k = 1: no collisions to speak of
    return {"chi2": chi2, "dof": float(dof), "p_value": float(stats.chi2.sf(chi2, dof)),
            "explained_variance": explained, "outside_sum_sq": sum_sq,
            "collision_variance": sum_sq / (m_live * params.k)}


def _summary(gof: dict[str, float], fit: _Fit, model: np.ndarray, params: RapporParams, n: int,
             est: np.ndarray, detected: np.ndarray, alias: np.ndarray, empty: np.ndarray,
             screened: bool, control: str, alpha: float, background: tuple[float, float]) -> dict[str, Any]:
    """Reports, mass, detections, explained variance and the goodness-of-fit checks."""
    chi2, dof, gof_p = gof["chi2"], int(gof["dof"]), gof["p_value"]
    # the intercept b is the background bit rate of strings outside the model: mass = b·k/h̄,
    # h̄ = k(1 − (1 − 1/k)^h) the expected number of distinct Bloom bits of a string
    per_mass = (1 - (1 - 1 / params.k) ** params.h)
    outside, outside_se = background[0] / per_mass, math.sqrt(max(background[1], 0.0)) / per_mass
    outside_p = float(stats.norm.sf(outside / outside_se)) if outside_se > 0 else math.nan
    n_alias = int((alias != np.arange(alias.shape[0])).sum())
    warnings = []
    if gof_p < GOF_WARNING_P:
        cause = ("many candidates outside the screened model carry mass, or a frequent string is missing "
                 "from the candidate list" if screened else
                 "a frequent string is probably missing from the candidate list")
        warnings.append(
            f"the candidates do not explain the data (goodness of fit chi2 = {chi2:.0f} on {dof} df, "
            f"p = {gof_p:.2g}): {cause}; the standard errors include the collision noise this causes")
    if math.isfinite(outside_p) and outside_p < GOF_WARNING_P and not screened:
        warnings.append(f"about {outside:.3f} (± {outside_se:.3f}) of the reports' mass is in strings "
                        f"outside the candidate list (p = {outside_p:.2g})")
    if n_alias:
        warnings.append(f"{n_alias} candidate(s) set exactly the same Bloom bits as another candidate "
                        "and cannot be told apart (their rows are empty)")
    if int(empty.sum()):
        warnings.append(f"{int(empty.sum())} candidate(s) set no bit in a cohort with reports")
    if not fit.full_rank:
        warnings.append("the candidates' Bloom bits are linearly dependent; some estimates are not "
                        "identifiable (use more cohorts or bits, or fewer candidates)")
    finite = np.isfinite(est)
    return {
        "reports": int(n),
        "cohorts_with_reports": int(fit.resid.shape[0] // params.k),
        "candidates": int(est.shape[0]),
        "model_size": int(model.shape[0] - 1),
        "screened": bool(screened),
        "detected": int(detected.sum()),
        "allocated_mass": float(est[detected].sum()),
        "estimated_mass": float(est[finite].sum()),
        "mass_outside_model": outside,
        "mass_outside_model_se": outside_se,
        "mass_outside_model_p_value": outside_p,
        "explained_variance": gof["explained_variance"],
        "gof_statistic": chi2,
        "gof_df": dof,
        "gof_p_value": gof_p,
        "collision_variance": gof["collision_variance"],
        "control": control,
        "alpha": alpha,
        "warning": "; ".join(warnings) if warnings else None,
    }
