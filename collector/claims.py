"""The central (ε, δ) each window's reports support, from exactly what the collector recorded
of the shuffled batches they came in (issue 28 §3).

The store keeps a ``ShuffleRecord`` per (metric, fingerprint, window) (collector/storage/shuffled.py);
this module turns it into the ``ShuffledWindow`` of the claim policy and asks
``estimators.amplification.central_claim`` — it restates none of the mathematics:

- ``smallest_batch``, ``smallest_segment``, ``smallest_cohort``: as recorded (envelopes alike in
  everything sent in clear, in the smallest forwarded batch of the window);
- ``envelope_epsilon``: the largest local ε one recorded envelope carried (all its reports, of every
  metric in it; memoised metrics at r·ε∞);
- ``envelopes_per_device``: ⌊reports_per_window / m⌋ for the fewest reports m of the metric any
  recorded envelope held — a device's ledger allows reports_per_window reports of the metric per
  window, so it can have sent at most that many envelopes of at least m reports;
- ``unshuffled_reports``: the window's reports minus those recorded as shuffled (any report that
  came plain or sealed directly makes the window claim only its local ε);
- cohorts: whether the protocol sends one in clear and whether it is permanent (as ``ldpt plan``
  reads a registry: estimators.shuffle_plan); ``krr``: k when every recorded envelope held exactly
  one report (of rr or grr);
- ``epsilon_inf``: the metric's longitudinal ε when it is memoised.

The result is ``meta.privacy`` of every estimate (CLI, API, dashboard): the local ε and, per
window, the claim with its theorem and inputs (docs/privacy.md, "The central claim of shuffled
reports").
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Sequence
from typing import Any

from collector.storage.base import WindowInfo, date_filter_ok
from collector.storage.shuffled import ShuffleRecord
from estimators.amplification import DEFAULT_DELTA, CentralClaim, ShuffledWindow, central_claim, krr_size
from sketches import server_half

__all__ = ["privacy_meta", "privacy_note", "shuffled_window", "window_claim", "windows_in_query"]


def shuffled_window(spec: Any, record: ShuffleRecord | None, window_reports: int) -> ShuffledWindow:
    """The claim policy's input for one window of ``spec`` (module docstring); ``record``: what
    came shuffled (None: nothing), ``window_reports``: every report of the window under the
    metric's fingerprint."""
    proto = server_half(spec)
    r = max(1, int(spec.reports_per_window))
    memo = None if proto.epsilon_longitudinal is None else float(proto.epsilon_longitudinal)
    m = proto.clear_cohorts   # discover: its group; 1 for none
    if record is None:
        return ShuffledWindow(None, float(proto.epsilon), envelopes_per_device=r,
                              unshuffled_reports=int(window_reports), epsilon_inf=memo)
    return ShuffledWindow(
        smallest_batch=int(record.smallest_batch),
        envelope_epsilon=float(record.envelope_epsilon),
        envelopes_per_device=max(1, r // max(1, int(record.min_reports))),
        unshuffled_reports=max(0, int(window_reports) - int(record.reports)),
        smallest_segment=int(record.smallest_segment),
        has_cohorts=m > 1,
        cohorts_permanent=proto.cohort_permanent,
        smallest_cohort=int(record.smallest_cohort) if m > 1 else None,
        epsilon_inf=memo,
        krr=krr_size(proto) if int(record.max_envelope_reports) == 1 else None)


@functools.lru_cache(maxsize=4096)
def window_claim(window: ShuffledWindow, delta: float = DEFAULT_DELTA) -> CentralClaim:
    """``central_claim`` memoised (a series of a year asks the same few windows' bounds again)."""
    return central_claim(window, delta)


def windows_in_query(stored: Iterable[WindowInfo], fingerprint: str, windows: Sequence[str] | None,
                     since: str | None, until: str | None) -> dict[str, int]:
    """window -> reports, of the stored windows an estimate over (windows | since..until) reads."""
    out: dict[str, int] = {}
    for w in stored:
        if w.fingerprint != fingerprint or (windows is not None and w.window not in windows):
            continue
        if date_filter_ok(w.window, since, until):
            out[w.window] = out.get(w.window, 0) + int(w.reports)
    return dict(sorted(out.items()))


def privacy_meta(spec: Any, window_reports: dict[str, int], records: Iterable[ShuffleRecord],
                 delta: float = DEFAULT_DELTA) -> dict[str, Any]:
    """``meta.privacy``: the metric's local ε, and per window the central claim (its (ε, δ),
    theorem, crowd n, the envelope's ε₀, the reason it falls back or what limits it) with the
    inputs it was computed from; ``central_epsilon``: the weakest window's ε (a device that
    reported in several windows composes them: this is per window, not for the range)."""
    proto = server_half(spec)
    by_window = {r.window: r for r in records}
    rows = []
    for window, reports in window_reports.items():
        record = by_window.get(window)
        inputs = shuffled_window(spec, record, reports)
        claim = window_claim(inputs, delta)
        rows.append({"window": window, "reports": reports,
                     "shuffled_reports": 0 if record is None else int(record.reports),
                     **claim.as_dict(), "inputs": dataclasses.asdict(inputs)})
    out: dict[str, Any] = {
        "epsilon_per_report": float(proto.epsilon),
        "reports_per_window": int(spec.reports_per_window),
        "local_epsilon": float(proto.epsilon) * int(spec.reports_per_window),
        "shuffle_required": bool(getattr(spec, "shuffle_required", False)),
        "delta": delta,
        "windows": rows,
    }
    if proto.epsilon_longitudinal is not None:
        out["epsilon_inf"] = float(proto.epsilon_longitudinal)
    if rows:
        weakest = max(rows, key=lambda row: row["epsilon"])
        out["central_epsilon"] = weakest["epsilon"]
        out["central_delta"] = max(row["delta"] for row in rows)
        out["amplified_windows"] = sum(1 for row in rows if row["amplified"])
    return out


def privacy_note(privacy: dict[str, Any]) -> str:
    """What a table's header line adds (cli/output.py): the windows' central claims when a window
    got one, or why not when the metric requires shuffling; "" otherwise (the header's epsilon is
    the local one)."""
    rows = privacy.get("windows") or []
    amplified = [row for row in rows if row["amplified"]]
    if not amplified:
        if privacy.get("shuffle_required") and rows:
            return f"  central epsilon: none ({rows[0]['reason']})"
        return ""
    weakest = max(rows, key=lambda row: row["epsilon"])
    if len(rows) == 1:
        return (f"  central (epsilon, delta) = ({weakest['epsilon']:.4g}, {weakest['delta']:.0e}) "
                f"by {weakest['theorem']}, crowd {weakest['n']:,}")
    best = min(amplified, key=lambda row: row["epsilon"])
    text = (f"  central epsilon per window {best['epsilon']:.4g} to {weakest['epsilon']:.4g} "
            f"(delta {max(row['delta'] for row in amplified):.0e}) over {len(rows):,} windows")
    if len(amplified) < len(rows):
        text += (f", {len(rows) - len(amplified):,} of them only the local epsilon "
                 f"(window {weakest['window']}: {weakest['reason']})")
    return text
