"""The numbers that repeat in a device's reports and so link them (docs/privacy.md, "What
leaves the device"): which a registry makes its devices send, and how many bits they carry.

A report carries no identifier, but some protocols send a value-independent number derived
from the device's secret that stays the same in every report of the metric:

- RAPPOR's cohort in [0, m): one per device, shared by all its RAPPOR metrics (as in Chrome);
  with several RAPPOR metrics of different m the cohorts are the one HMAC word reduced mod
  each m, so together they carry at most log₂ lcm(m) bits;
- LOLOHA's cohort (its hash function) in [0, m), per metric;
- dBitFlipPM's window (its sampled buckets) in [0, k), per metric;
- discover's group in [0, L + 1) (which level of the prefix tree the device reports, or the
  held-out group), per metric;
- OLH's cohort in [0, m), re-derived every UTC day: it links the reports of one day only.

With the public dimensions (their combinations, client_sdk.dimensions) these form a tuple the
collector sees in every batch; its entropy is at most the sum of log₂ of each number's range
(uniform and independent numbers reach it), the most it can say to single a device out.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable

#: How long a number stays the same: across days (permanent) or within one UTC day.
PERMANENT = "permanent"
DAILY = "a UTC day"


@dataclasses.dataclass(frozen=True)
class LinkingNumber:
    """One number a device repeats in its reports."""

    metrics: tuple[str, ...]   # the metrics whose reports carry it
    what: str                  # "RAPPOR cohort", "discover group", ...
    values: int                # its range [0, values)
    lasts: str                 # PERMANENT or DAILY

    @property
    def bits(self) -> float:
        return math.log2(self.values) if self.values > 1 else 0.0


def linking_numbers(registry: Iterable) -> list[LinkingNumber]:
    """The numbers the registry's metrics make a device repeat, in registry order (RAPPOR's one
    shared cohort where its first metric is)."""
    from sketches import server_half
    out: list[LinkingNumber] = []
    rappor: list[tuple[str, int]] = []
    rappor_at = None
    for spec in registry:
        number = server_half(spec).linking_number()
        if number is None:
            continue
        what, values, permanent, shared = number
        if shared:   # RAPPOR's one cohort per device: every such metric's range, merged below
            rappor.append((spec.name, values))
            if rappor_at is None:
                rappor_at = len(out)
                out.append(None)  # type: ignore[arg-type]  # filled below, once all are known
        else:
            out.append(LinkingNumber((spec.name,), what, values, PERMANENT if permanent else DAILY))
    if rappor_at is not None:
        out[rappor_at] = LinkingNumber(tuple(n for n, _ in rappor), "RAPPOR cohort",
                                       math.lcm(*{m for _, m in rappor}), PERMANENT)
    return out


def permanent_bits(numbers: Iterable[LinkingNumber]) -> float:
    """Bits the permanent numbers carry together (an upper bound: the sum of their log₂)."""
    return sum(n.bits for n in numbers if n.lasts == PERMANENT)
