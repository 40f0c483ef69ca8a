"""Discover the frequent strings of a ``protocol = "discover"`` sketch (docs/discovery.md).

Prefix Extending Method (Wang, Li, Jha 2021) over local hashing with a public seed set
(client_sdk.protocols.discover). Level ℓ = 1..L uses group ℓ−1 only:

1. candidates: the children of the keys kept at level ℓ−1 (level 1: all 256 one-byte keys and
   the empty string);
2. screen: the local-hashing support of every candidate, S(v) = Σ_s Z_s[H_s(v)] with
   Z_s = (T_s − n_s q')/(p' − q'), and ĉ = (S − n/g)/(1 − 1/g) (Wang et al. 2017) — one gather;
3. refine: the ``screen`` best are re-estimated jointly, which removes the bias of frozen hash
   collisions between them (the seed set is public and fixed, so collisions do not average out):
   E[S(v)] = Σ_{v'∈C} φ(v,v') c(v') + (n − Σ_{v'∈C} c(v'))/g, φ(v,v') = (1/m) Σ_s 1[H_s(v) = H_s(v')],
   i.e. (Φ − J/g) c = S − n/g. The mass outside C enters only through its mean share 1/g;
   what remains, Σ_{v'∉C} c(v')(φ(v,v') − 1/g), has RMS about √(Σ_{v'∉C} c(v')²/(g·m)) — small
   because the heavy strings are in C;
4. keep the ``keep`` largest.

All keys kept at level L are then estimated jointly on the held-out group L and the ``top`` of
them (ranked on group L−1) reported, so the estimates, intervals and p-values come from data that
played no part in choosing them (no winner's curse); they are scaled to the whole population by
the group's *expected* share, G = L + 1 (``scale_to_population``: never by its observed size,
which forged reports choose), and their variance carries a bound on the residual collision bias
of the strings that were not kept. Each estimate is then capped by its prefixes' estimates on the
selection groups (``chain_caps``): forged reports can claim the held-out group, whose estimate is
scaled by G, and the cap makes what they add independent of where they are put; what they can
take away is G·q*/(p* − q*) per report through a string's own cells (``estimators.poisoning``)
plus the joint system's cross terms, which ``forged_reach`` computes for each frame
(``attrs["forged_report_max_down"]``; docs/security.md).
The group sizes are tested against the multinomial honest devices produce (``group_size_test``).
``decode_candidates`` estimates a given list the same way, with the discovered keys as nuisance.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
from scipy import sparse, stats

from client_sdk.errors import EstimationError
from client_sdk.protocols.discover import FLAG_END, FLAG_OPEN, truncate
from sketches.base import Sketch
from sketches.discover import DiscoverServer, bucket, fingerprints

from .intervals import score_interval, skewed_score_interval, z_value
from .multiple_testing import detect

#: Reported strings when no --top is given.
DEFAULT_TOP = 20
#: Largest ``top``: each level refines 8·top candidates jointly (a dense system, cost ∝ top³);
#: at the defaults, n = 10⁵ and ε = 4 top = 100 takes 44 s and 260 MB, top = 250 already 124 s.
MAX_TOP = 100
#: Candidate gather is done this many candidates at a time (memory: seeds × chunk int64).
CHUNK = 2048
#: Standard errors of margin in the prefix caps (``chain_caps``): large enough that honest
#: estimates are almost never capped, the free room it leaves a forger is CAP_Z standard errors.
CAP_Z = 4.0
#: Group-size p-value below which discover estimates carry a warning (attrs["warning"]).
GROUP_SIZE_ALPHA = 1e-6
#: Listed candidates (--candidates) estimated jointly at most this many at a time: the joint
#: system is k × k dense (100,000 listed strings would need 80 GB), ~1 s per 1,000 at the defaults.
JOINT_MAX = 1000

Key = tuple[bytes, bool]  # (bytes, ended)


def _key_blob(key: Key) -> bytes:
    b, ended = key
    return (FLAG_END if ended else FLAG_OPEN) + b


def children(kept: list[Key]) -> list[Key]:
    """Keys of the next level below the kept ones (module docstring)."""
    out: list[Key] = []
    for b, ended in kept:
        if ended:
            out.append((b, True))
        else:
            out.extend((b + bytes((x,)), False) for x in range(256))
            out.append((b, True))
    return out


def per_holder(proto: DiscoverServer) -> float:
    """How much each device holding a key adds to the variance of its one-row estimate
    (D's slope in the key's own count: (p'(1 − p') − (1/g)(1 − 1/g))/(p' − q')²)."""
    p, g = proto.p, proto.params.g
    return (p * (1 - p) - (1 / g) * (1 - 1 / g)) / (p - proto.q) ** 2


class _Group:
    """One group's sketch rows as Z_s[y] (debiased bucket counts) and its report count."""

    def __init__(self, proto: DiscoverServer, counts: np.ndarray, reports: np.ndarray) -> None:
        par = proto.params
        self.proto = proto
        self.g, self.m = par.g, par.seeds
        self.n = int(reports.sum())
        delta = proto.p - proto.q
        self.z = ((counts - reports[:, None] * proto.q) / delta).ravel()
        self.rows = (np.arange(self.m, dtype=np.int64) * self.g)[:, None]

    def cells(self, fps: np.ndarray) -> np.ndarray:
        """Flat cell s·g + H_s(v) of every seed and candidate: (m, len(fps))."""
        return self.rows + bucket(np.arange(self.m)[:, None], fps[None, :], self.g)

    def naive(self, fps: np.ndarray) -> np.ndarray:
        """Per-candidate local-hashing estimates (step 2), chunked over candidates."""
        support = np.concatenate([self.z[self.cells(fps[i:i + CHUNK])].sum(axis=0)
                                  for i in range(0, len(fps), CHUNK)]) if len(fps) else np.zeros(0)
        return (support - self.n / self.g) / (1 - 1 / self.g)

    def system(self, fps: np.ndarray) -> tuple[sparse.csr_matrix, np.ndarray]:
        """The joint system of ``fps``: the (cell × key) incidence of H_s and A⁻¹, A = Φ − J/g."""
        k = len(fps)
        cells = self.cells(fps)
        onehot = sparse.csr_matrix((np.ones(cells.size), (cells.ravel(), np.tile(np.arange(k), self.m))),
                                   shape=(self.m * self.g, k))
        phi = (onehot.T @ onehot).toarray() / self.m
        a = phi - 1.0 / self.g
        # A is symmetric, ≈ (1 − 1/g)·I when m(g−1) ≫ |C|; when the seeds are too few for this many
        # candidates it is singular, and the pseudo-inverse gives the least-norm solution
        w, v = np.linalg.eigh(a)
        keep = w > 1e-9 * max(float(w.max(initial=0.0)), 1e-300)
        return onehot, (v[:, keep] / w[keep]) @ v[:, keep].T

    def per_holder(self) -> float:
        """``per_holder`` of this group's protocol."""
        return per_holder(self.proto)

    def joint(self, fps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Joint estimates (step 3), their covariance A⁻¹ D A⁻¹ (docs/discovery.md) and each
        key's weight on its own support, A⁻¹_kk (its variance's slope in its own count is
        (A⁻¹)²_kk·``per_holder``: score intervals)."""
        onehot, a_inv = self.system(fps)
        support = onehot.T @ self.z
        counts = a_inv @ (support - self.n / self.g)
        g = self.g
        base = (1 / g) * (1 - 1 / g)
        d = self.n * base / (self.proto.p - self.proto.q) ** 2 + np.clip(counts, 0, self.n) * self.per_holder()
        cov = (a_inv * d[None, :]) @ a_inv.T
        return counts, cov, np.diag(a_inv).copy()


def forged_reach(group: _Group, fps: np.ndarray, rows: int) -> np.ndarray:
    """How much one forged report in ``group`` can lower the joint estimate of each of the first
    ``rows`` keys of ``fps`` (a count of that group; ≥ 0), over every (seed, bucket) it may send.

    The joint estimate is linear in the sketch: ĉ = A⁻¹(S − n/g), and a report (s, y) adds
    1[H_s(k) = y]/(p' − q') − q'/(p' − q') to every S_k and 1 to n. So its effect on ĉ_t is
    −(q'/(p' − q') + 1/g)·Σ_k A⁻¹_tk + Σ_{k: H_s(k) = y} A⁻¹_tk/(p' − q'), and the worst report is
    the cell that minimises the last sum. Its first term alone is local hashing's δ (a report
    supporting none of t's cells); the sum adds the joint system's cross terms — the kept keys
    that share many cells with t (nuisance keys nobody holds that the search kept for the
    support heavy strings give their cells), whose rise the joint solve takes out of t."""
    onehot, a_inv = group.system(fps)
    p, q, g = group.proto.p, group.proto.q, group.g
    out = np.empty(rows)
    for i in range(0, rows, 64):   # (cells × 64) at a time: a few MB whatever the key count
        cols = a_inv[:, i:min(i + 64, rows)]
        base = -(q / (p - q) + 1 / g) * cols.sum(axis=0)
        per_cell = np.asarray(onehot @ cols) / (p - q)
        out[i:i + 64] = -(base + np.minimum(per_cell.min(axis=0), 0.0))
    return np.maximum(out, 0.0)


def _top(values: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest values, largest first."""
    if len(values) <= k:
        return np.argsort(-values, kind="stable")
    idx = np.argpartition(-values, k - 1)[:k]
    return idx[np.argsort(-values[idx], kind="stable")]


class _Level:
    """What the search learnt at one level: its group, the screened keys' joint estimates and
    a bound on the count of any key that was not kept (used by ``chain_caps``)."""

    def __init__(self, group: _Group, fps: np.ndarray, joint: np.ndarray, outside_max: float) -> None:
        self.group, self.fps, self.joint, self.outside_max = group, fps, joint, outside_max


def search(proto: DiscoverServer, sketch: Sketch, *, keep: int, screen: int,
           levels: list[_Level] | None = None) -> tuple[list[Key], np.ndarray, float]:
    """Levels 1..L (module docstring): the kept keys of level L, their level-L estimates and the
    standard error of a zero count at level L. ``levels``, when given, receives each level's
    ``_Level``."""
    par = proto.params
    counts = sketch.counts.reshape(par.groups, par.seeds, par.g)
    reports = sketch.reports.reshape(par.groups, par.seeds)
    kept: list[Key] = [(b"", False)]
    est, null_se = np.zeros(1), 0.0
    for level in range(1, par.max_length + 1):
        group = _Group(proto, counts[level - 1], reports[level - 1])
        if group.n == 0:
            raise EstimationError(f"no reports in discovery group {level - 1}; "
                                  "discovery needs reports in every group")
        cands = children(kept)
        fps = fingerprints([_key_blob(c) for c in cands])
        chosen = _top(group.naive(fps), screen)
        joint = group.joint(fps[chosen])[0]
        order = _top(joint, keep)
        kept = [cands[chosen[i]] for i in order]
        est = joint[order]
        null_se = float(np.sqrt(proto.variance(group.n, 0.0)))
        if levels is not None:
            floor = (max(float(est.min()), 0.0) + 3 * null_se) if len(est) else 0.0
            levels.append(_Level(group, fps[chosen], joint, floor))
    return kept, est, null_se


def ancestor(key: Key, level: int) -> Key:
    """The level-``level`` key of the strings under a level-L key (client_sdk.protocols.discover:
    the first ``level`` bytes, open, or the whole string, ended, if it is shorter)."""
    b, _ = key
    return (b[:level], False) if len(b) >= level else (b, True)


def _level_estimates(level: _Level, fps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Estimates of arbitrary keys on one selection level, and their variances.

    One row of the level's joint system, with the screened keys C as nuisance at their joint
    estimates: ĉ(a) = (S(a) − n/g − Σ_{k∈C, k≠a} (φ(a,k) − 1/g) ĉ(k)) / (1 − 1/g). For a ∈ C
    this is its joint estimate; for other keys it removes the frozen collisions with the heavy
    ones. The variance is the group's local-hashing variance plus the residual-collision bound
    of ``_held_out`` (mass outside C)."""
    grp = level.group
    g, m = grp.g, grp.m
    out_c, out_v = [], []
    cells_c = grp.cells(level.fps)
    k = len(level.fps)
    onehot_c = sparse.csr_matrix((np.ones(cells_c.size), (cells_c.ravel(), np.tile(np.arange(k), m))),
                                 shape=(m * g, k))
    member = {int(f): i for i, f in enumerate(level.fps)}
    p, base = grp.proto.p, (1 / g) * (1 - 1 / g)
    outside = max(0.0, grp.n - float(np.clip(level.joint, 0, None).sum()))
    residual = max(level.outside_max, 0.0) * outside / (g * m * (1 - 1 / g))
    for i in range(0, len(fps), CHUNK):
        part = fps[i:i + CHUNK]
        cells = grp.cells(part)
        onehot = sparse.csc_matrix((np.ones(cells.size), (cells.ravel(), np.tile(np.arange(len(part)), m))),
                                   shape=(m * g, len(part)))
        phi = (onehot.T @ onehot_c).toarray() / m                          # φ(a, k)
        nuisance = (phi - 1 / g) @ level.joint
        self_idx = np.array([member.get(int(f), -1) for f in part])
        inside = self_idx >= 0
        nuisance[inside] -= (1 - 1 / g) * level.joint[self_idx[inside]]   # k = a is not nuisance
        support = grp.z[cells].sum(axis=0)
        est = (support - grp.n / g - nuisance) / (1 - 1 / g)
        var = (grp.n * base + np.clip(est, 0, grp.n) * (p * (1 - p) - base)) / (p - grp.proto.q) ** 2
        out_c.append(est)
        out_v.append(var + residual)
    if not out_c:
        return np.zeros(0), np.zeros(0)
    return np.concatenate(out_c), np.concatenate(out_v)


def cap_margin(proto: DiscoverServer, reports_per_group: float) -> float:
    """How far above a zero prefix estimate its cap sits, at population scale: the CAP_Z
    standard errors of ``chain_caps``' score bound (taken at the bound), with ``reports_per_group``
    reports in the level's group — the room placement leaves a forger beyond g per report."""
    groups = proto.params.groups
    at_zero = np.array([float(proto.variance(reports_per_group, 0.0))])
    v0, s = population_score_terms(HeldOut(np.zeros(1), at_zero, np.ones(1), int(reports_per_group),
                                           per_holder(proto)), groups)
    return float(score_interval(np.zeros(1), v0, s, CAP_Z, np.inf)[1][0])


def chain_caps(proto: DiscoverServer, sketch: Sketch, levels: list[_Level], keys: list[Key]) -> np.ndarray:
    """Population-scale upper bounds on the counts of level-L ``keys`` from the selection groups.

    A string's count is at most that of each of its prefixes, and group ℓ−1 estimates the
    prefix of level ℓ independently of the held-out group. So min over ℓ of (prefix estimate
    scaled by n/n_ℓ + CAP_Z standard errors) bounds the string's population count. Honest data
    rarely reach it (each level's bound exceeds an unbiased held-out estimate by CAP_Z of its own
    standard errors; Gaussian tail 4/√2 = 2.8σ per level). A forger, though, must raise *every*
    group to move the minimum: with m_t of its reports in group t it moves the bound of level
    t+1 by about G·g·m_t (every group is scaled by its expected share 1/G), and
    min_t G·m_t ≤ Σ_t m_t = m, so whatever the placement the capped estimate moves up by at most
    about g·m — the honest-placement figure — plus the CAP_Z margin (docs/security.md). Reports
    that claim a group without supporting a prefix lower its bound by at most G·q*/(p* − q*)
    each, and only bite once they have used up its CAP_Z margin."""
    groups = proto.params.groups
    caps = np.full(len(keys), np.inf)
    for depth, level in enumerate(levels, start=1):
        anc = [ancestor(k, depth) for k in keys]
        distinct = list(dict.fromkeys(anc))
        est, var = _level_estimates(level, fingerprints([_key_blob(a) for a in distinct]))
        one_row = np.full(len(est), 1.0)   # _level_estimates' variance: one row, weight 1
        v0, s = population_score_terms(HeldOut(est, var, one_row, level.group.n, level.group.per_holder()), groups)
        # the score bound: CAP_Z standard errors taken at the bound, not at the estimate (a low
        # prefix estimate's own standard error is too small and capped honest strings)
        upper = score_interval(groups * est, v0, s, CAP_Z, np.inf)[1]
        where = {a: i for i, a in enumerate(distinct)}
        caps = np.minimum(caps, upper[[where[a] for a in anc]])
    return caps


def group_size_test(proto: DiscoverServer, sketch: Sketch) -> tuple[float, float]:
    """(p-value of Pearson's chi-square that the group sizes are multinomial with equal
    probabilities, z of the held-out group's excess). Honest devices' groups are uniform
    (HMAC of their secret); a forger chooses its group, and an excess in the held-out group is
    the signature of the held-out attack (512 extra reports among 10⁵ at L = 16: z ≈ 7)."""
    par = proto.params
    sizes = sketch.reports.reshape(par.groups, -1).sum(axis=1).astype(np.float64)
    n = float(sizes.sum())
    if n <= 0:
        return 1.0, 0.0
    expected = n / par.groups
    chi2 = float(((sizes - expected) ** 2 / expected).sum())
    z = float((sizes[-1] - expected) / np.sqrt(n * (1 / par.groups) * (1 - 1 / par.groups)))
    return float(stats.chi2.sf(chi2, par.groups - 1)), z


def _held_group(proto: DiscoverServer, sketch: Sketch) -> _Group:
    """The held-out group (the last) of a sketch."""
    par = proto.params
    return _Group(proto, sketch.counts.reshape(par.groups, par.seeds, par.g)[-1],
                  sketch.reports.reshape(par.groups, par.seeds)[-1])


@dataclasses.dataclass(frozen=True)
class HeldOut:
    """Estimates of some keys on one group: counts, variances at the estimates, each key's weight
    on its own support (A⁻¹_kk), the group's reports and ``_Group.per_holder``."""

    counts: np.ndarray
    variances: np.ndarray
    weights: np.ndarray
    n: int
    per_holder: float

    @property
    def slopes(self) -> np.ndarray:
        """Each variance's slope in the key's own count: (A⁻¹_kk)²·per_holder."""
        return self.weights ** 2 * self.per_holder

    def head(self, k: int) -> HeldOut:
        """The first ``k`` keys."""
        return HeldOut(self.counts[:k], self.variances[:k], self.weights[:k], self.n, self.per_holder)

    @staticmethod
    def concat(parts: list[HeldOut]) -> HeldOut:
        """The keys of ``parts`` in order (one group: the same n)."""
        return HeldOut(*(np.concatenate([getattr(h, f) for h in parts]) for f in ("counts", "variances", "weights")),
                       parts[0].n, parts[0].per_holder)


def held_out_estimates(proto: DiscoverServer, sketch: Sketch, keys: list[Key], outside_max: float) -> HeldOut:
    """Joint estimates of ``keys`` on the held-out group, their variances and each variance's
    slope in the key's own count (``_Group.joint``).

    The variance adds the residual bias of the mass outside ``keys`` over the public seed set,
    Σ_{v'∉C} c(v')²·(1/g)(1−1/g)/m / (1−1/g)², bounded by ``outside_max``·(n_h − Σ_C ĉ)·(1/g)/(m(1−1/g))
    with ``outside_max`` an upper bound on any outside count (docs/discovery.md).
    """
    par = proto.params
    held = _held_group(proto, sketch)
    if held.n == 0:
        raise EstimationError("no reports in the held-out group")
    counts, cov, weights = held.joint(fingerprints([_key_blob(k) for k in keys]))
    outside = max(0.0, held.n - float(np.clip(counts, 0, None).sum()))
    g = par.g
    residual = max(outside_max, 0.0) * outside / (g * par.seeds * (1 - 1 / g))
    return HeldOut(counts, np.diag(cov) + residual, weights, held.n, held.per_holder())


def discover(proto: DiscoverServer, sketch: Sketch, *, top: int | None = None, keep: int | None = None,
             screen: int | None = None, confidence: float = 0.95, alpha: float = 0.05,
             control: str = "fwer", simultaneous: bool = False) -> pd.DataFrame:
    """The ``top`` discovered strings with held-out estimates (columns of estimators.frequency).

    All ``keep`` keys kept at level L are estimated jointly on the held-out group (so the heavy
    ones absorb their own mass); the ``top`` best ranked on the selection data are reported.
    """
    top = DEFAULT_TOP if top is None else top
    keep = max(2 * top, 40) if keep is None else keep
    screen = 4 * keep if screen is None else screen
    if top > MAX_TOP:
        raise EstimationError(f"top = {top}: a discover metric reports at most {MAX_TOP} strings (the search "
                              f"refines 8 × top candidates jointly at every level; docs/discovery.md)")
    if top < 1 or keep < top or screen < keep:
        raise EstimationError(f"need 1 <= top <= keep <= screen, got {top}, {keep}, {screen}")
    n = sketch.total_reports
    if n <= 0:
        raise EstimationError("no reports in the selected window(s)")
    levels: list[_Level] = []
    kept, held_out, reach = _search_and_hold_out(proto, sketch, kept_extra=[], keep=keep, screen=screen,
                                                 levels=levels, reach_rows=top)
    caps = chain_caps(proto, sketch, levels, kept[:top])
    df = held_out_frame(proto, sketch, kept[:top], held_out.head(top), n, caps, reach, confidence=confidence,
                alpha=alpha, control=control, simultaneous=simultaneous)
    # only what was found: the search always keeps ``keep`` keys, and below the heavy strings they
    # are byte strings nobody holds (the multiple-testing family stays the ``top`` ranked keys)
    found = df[df["detected"]].reset_index(drop=True)
    found.attrs = dict(df.attrs, tested=len(df))
    return found


def key_text(key: Key) -> str:
    """An unambiguous printable form of a key: printable ASCII as is, a backslash as ``\\\\``,
    every other byte as ``\\xNN``, and ``\\…`` after a string cut at max_length (not ended).
    Two keys whose bytes decode to the same text (invalid UTF-8 is shown as U+FFFD) differ here."""
    b, ended = key
    text = "".join("\\\\" if x == 0x5C else chr(x) if 0x20 <= x < 0x7F else f"\\x{x:02x}" for x in b)
    return text if ended else text + "\\…"


def _search_and_hold_out(proto: DiscoverServer, sketch: Sketch, *, kept_extra: list[Key], keep: int, screen: int,
                         levels: list[_Level] | None = None, reach_rows: int = 0
                         ) -> tuple[list[Key], HeldOut, np.ndarray]:
    """Search, then held-out estimates of ``kept_extra`` + the kept keys (not repeated); a
    ``kept_extra`` longer than JOINT_MAX (distinct keys) is estimated in blocks and returned alone.
    Last, ``forged_reach`` of the first ``reach_rows`` keys on the held-out group."""
    kept, est, null_se = search(proto, sketch, keep=keep, screen=screen, levels=levels)
    n_level = int(sketch.reports.reshape(proto.params.groups, -1)[-2].sum())
    # no key outside the kept ones exceeds the smallest kept estimate by more than 3 standard errors
    floor = (max(float(est.min()), 0.0) + 3 * null_se) if len(est) else 0.0
    n_h = int(sketch.reports.reshape(proto.params.groups, -1)[-1].sum())
    outside_max = floor * n_h / max(n_level, 1)
    if len(kept_extra) <= JOINT_MAX:
        keys = list(dict.fromkeys(kept_extra + kept))
        held_out = held_out_estimates(proto, sketch, keys, outside_max)
        reach = forged_reach(_held_group(proto, sketch), fingerprints([_key_blob(k) for k in keys]), reach_rows) \
            if reach_rows else np.zeros(0)
        return keys, held_out, reach
    # a long list (distinct keys): JOINT_MAX at a time, each jointly with the kept keys, so the
    # k × k joint system stays bounded; the other listed keys are then outside C, and any of them
    # that was not kept is under the same bound ``outside_max`` as every unkept string
    parts, reaches = [], []
    held = _held_group(proto, sketch)
    for i in range(0, len(kept_extra), JOINT_MAX):
        chunk = kept_extra[i:i + JOINT_MAX]
        keys = list(dict.fromkeys(chunk + kept))
        parts.append(held_out_estimates(proto, sketch, keys, outside_max).head(len(chunk)))
        rows = min(len(chunk), max(0, reach_rows - i))
        if rows:
            reaches.append(forged_reach(held, fingerprints([_key_blob(k) for k in keys]), rows))
    return list(kept_extra), HeldOut.concat(parts), np.concatenate(reaches) if reaches else np.zeros(0)


def decode_candidates(proto: DiscoverServer, sketch: Sketch, candidates: list[str], *, confidence: float = 0.95,
                      alpha: float = 0.05, control: str = "fwer", simultaneous: bool = False) -> pd.DataFrame:
    """Estimate a given list of strings (``--candidates``) on the held-out group.

    The candidates (truncated as the devices truncate them, duplicates after truncation merged)
    are estimated jointly with the strings the search discovers, so heavy strings missing from the
    list do not leak their mass into the listed ones through frozen hash collisions.
    """
    par = proto.params
    n = sketch.total_reports
    if n <= 0:
        raise EstimationError("no reports in the selected window(s)")
    listed: dict[Key, None] = {}
    for value in candidates:
        b = truncate(value, par.max_length)
        listed.setdefault((b, len(b) < par.max_length))
    wanted = list(listed)
    levels: list[_Level] = []
    k = len(wanted)
    keys, held_out, reach = _search_and_hold_out(proto, sketch, kept_extra=wanted, keep=40, screen=160,
                                                 levels=levels, reach_rows=k)
    caps = chain_caps(proto, sketch, levels, wanted)
    return held_out_frame(proto, sketch, wanted, held_out.head(k), n, caps, reach, confidence=confidence,
                  alpha=alpha, control=control, simultaneous=simultaneous)


def scale_to_population(counts_h: np.ndarray, var_h: np.ndarray, groups: int, n: int
                        ) -> tuple[np.ndarray, np.ndarray]:
    """One group's counts to population counts by the group's expected share: ĉ = G·ĉ_h.

    An honest device is in each of the G groups with probability 1/G (HMAC of its secret), so of
    the c devices holding v, c_h ~ Binomial(c, 1/G) are in the group: E[G·ĉ_h] = c and
    Var[G·ĉ_h] = G²·Var[ĉ_h | c_h] + c(G − 1).

    The observed share n/n_h (a ratio estimator, whose split term is c(1 − c/n)(G − 1)) is
    slightly more precise for very frequent strings, but its denominator is the one quantity
    forged reports set freely: reports that claim the group with random content leave ĉ_h
    unbiased and inflate n_h, so every estimate shrank by c/n_h per forged report — 250 among
    50,000 (0.5 %) moved a string held by 18 % by −2.75 per report, 1,000 moved every estimate
    by −24 % (issue 26). By the expected share a forged report moves an estimate only through
    ĉ_h: at most +G·g (the prefix caps bound the rise) and −G·q*/(p* − q*) (docs/security.md).
    The price is the c·(c/n)(G − 1) of variance the ratio would save: about 11 % of the variance
    of a string held by 18 % of the devices, under 1 % below 2 %.
    """
    counts = counts_h * groups
    c = np.clip(counts, 0, n)  # the split term at the plug-in count (at most every report)
    return counts, var_h * groups * groups + c * (groups - 1)


def population_score_terms(held_out: HeldOut, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """(v₀, s): the population estimate's variance as v₀ + s·c in the true count c (the other
    keys at their estimates): G²·(held-out variance at c_h = 0) and G·(held-out slope) + G − 1,
    the split term c(G − 1) of ``scale_to_population`` included."""
    at_zero = held_out.variances - held_out.slopes * np.clip(held_out.counts, 0, held_out.n)
    return groups * groups * at_zero, groups * held_out.slopes + (groups - 1)


def population_skew_terms(proto: DiscoverServer, held_out: HeldOut) -> tuple[np.ndarray, np.ndarray]:
    """(k₀, k₁): the population estimate's third cumulant as k₀ + k₁·c in the true count c.

    At the held-out scale a key's estimate is about a·(S − n_h/g), a = A⁻¹_kk, a sum of
    Bernoulli reports scaled by a/(p' − q'): a holder's hits its cells with p', anyone else's
    with 1/g (over the seed it lands in), and a Bernoulli(π) has third cumulant
    π(1 − π)(1 − 2π). Scaling by G and the split c_h ~ Binomial(c, 1/G) add (law of total
    cumulance) 3·Cov(Var(ĉ_h | c_h), c_h) = 3·slope·c(1/G)(1 − 1/G) and the binomial's own
    c(1/G)(1 − 1/G)(1 − 2/G). The cross terms of the other keys are left out (A is near-diagonal
    when m(g − 1) ≫ |C|)."""
    groups, g, p, q = proto.params.groups, proto.params.g, proto.p, proto.q
    holder = p * (1 - p) * (1 - 2 * p)
    other = (1 / g) * (1 - 1 / g) * (1 - 2 / g)
    unit = (held_out.weights / (p - q)) ** 3
    k0 = groups ** 3 * unit * held_out.n * other
    k1 = groups ** 2 * (unit * (holder - other) + 3 * held_out.slopes * (1 - 1 / groups)
                        + (1 - 1 / groups) * (1 - 2 / groups))
    return k0, k1


def held_out_frame(proto: DiscoverServer, sketch: Sketch, final: list[Key], held_out: HeldOut, n: int,
                   caps: np.ndarray, reach: np.ndarray, *, confidence: float, alpha: float = 0.05,
                   control: str = "fwer", simultaneous: bool = False) -> pd.DataFrame:
    """The frame of ``final``'s held-out estimates: scaled to the population, capped by ``caps``
    (``chain_caps``), with score intervals, p-values of "count = 0", detections and attrs."""
    groups = proto.params.groups
    counts, variances = scale_to_population(held_out.counts, held_out.variances, groups, n)
    capped = counts > caps  # no string is more frequent than its prefixes (chain_caps)
    counts = np.minimum(counts, caps)
    std = np.sqrt(np.maximum(variances, 0.0))
    z = z_value(confidence, len(final) if simultaneous else 1)
    # score intervals: the variance (and skew) grow with the count, so they are taken at each
    # candidate count rather than at the estimate (a low estimate's plug-in interval is too short,
    # and the right skew of rare hits needs a longer lower side; docs/discovery.md)
    low, high = skewed_score_interval(counts, *population_score_terms(held_out, groups),
                                      *population_skew_terms(proto, held_out), z, n)
    with np.errstate(divide="ignore", invalid="ignore"):
        zs = np.where(std > 0, counts / std, np.inf * np.sign(counts))
    p_value = stats.norm.sf(zs)
    df = pd.DataFrame({
        "value": [b.decode("utf-8", errors="replace") for b, _ in final],
        "key": [key_text(k) for k in final],
        "estimate": counts,
        "proportion": counts / n,
        "std_err": std,
        "ci_low": low,
        "ci_high": high,
        "p_value": p_value,
        "detected": detect(p_value, alpha, control),
    })
    p_sizes, z_held = group_size_test(proto, sketch)
    df.attrs.update(protocol=proto.name, epsilon=proto.epsilon, n_reports=n, n_held_out=held_out.n,
                    confidence=confidence, simultaneous=simultaneous, post_processed=None, z=z,
                    max_length=proto.params.max_length, capped=int(capped.sum()),
                    group_size_p_value=p_sizes, held_out_excess_z=z_held,
                    # the most one forged report can lower any of these estimates (forged_reach;
                    # the caps keep any rise to about the gain): scaled like the estimates
                    forged_report_max_down=float(reach.max(initial=0.0)) * proto.params.groups)
    if p_sizes < GROUP_SIZE_ALPHA:
        df.attrs["warning"] = (f"the discovery groups' sizes are not what honest devices produce (chi-square "
                               f"p = {p_sizes:.1e}; held-out group {z_held:+.1f} sd): forged reports chose their "
                               "group; estimates are capped by their prefixes (docs/security.md)")
    return df
