"""`ldpt audit`: play the best attacker on the SDK's reports and print what it achieves."""

from __future__ import annotations

import dataclasses
import io
import json
from typing import TYPE_CHECKING

import click
import numpy as np

from client_sdk.errors import LdptError
from client_sdk.registry import Kind

from .common import emit, load_metric, output_options

if TYPE_CHECKING:  # pandas loads only when the audit runs (a fast `ldpt --help`)
    import pandas as pd


def _int_list(ctx: click.Context, param: click.Parameter, value: str) -> list[int]:
    try:
        out = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"{value!r}: expected comma-separated integers, e.g. 1,2,5") from None
    if not out or min(out) < 1:
        raise click.BadParameter(f"{value!r}: give positive integers")
    return out


@click.command()
@click.option("--metrics", "metrics_file", required=True, type=click.Path(dir_okay=False),
              help="Metric registry (TOML).")
@click.option("--metric", required=True, help="Metric name in the registry.")
@click.option("--reports", "reports", default="1,2,5,10", show_default=True, callback=_int_list,
              help="Numbers T of reports the attacker sees (comma-separated).")
@click.option("--pair", default=None, metavar="A,B",
              help="The two values the device may hold (default: the first two domain values, or a mean "
                   "metric's range ends; string metrics need it; numeric metrics take two numbers).")
@click.option("--trials", type=click.IntRange(min=20), default=1000, show_default=True,
              help="Games played per T.")
@click.option("--link-history", default="1,10", show_default=True, callback=_int_list,
              help="Earlier reports per device in the linkability game (comma-separated).")
@click.option("--link-devices", type=click.IntRange(min=2), default=400, show_default=True,
              help="Devices sharing one value in the linkability game.")
@click.option("--no-link", is_flag=True, help="Skip the linkability table.")
@click.option("--seed", type=int, default=None,
              help="Seed of the game's coin flips (the reports themselves use the OS CSPRNG, as the SDK).")
@output_options
def audit(metrics_file: str, metric: str, reports: list[int], pair: str | None, trials: int,
          link_history: list[int], link_devices: int, no_link: bool, seed: int | None, fmt: str,
          output: str | None) -> None:
    """Play the best distinguishing attacker on METRIC's real reports; compare with e^eps/(1+e^eps).

    For T reports of one device holding A or B, the likelihood-ratio attacker's accuracy (with a
    95% Clopper-Pearson interval) is printed beside the bound e^eps/(1+e^eps) for the eps the ledger
    charges for those reports, with the eps lower bound the accuracy proves. A second table
    shows how well reports of one device can be linked (AUC) and re-identified (docs/privacy.md).
    """
    import pandas as pd

    from estimators.audit import check_supported, comparison_specs, distinguish, link, linkable
    from sketches.metric_arrays import bucket_of

    _, spec = load_metric(metrics_file, metric)
    try:
        check_supported(spec)   # before the pair: a numeric mean has no domain to take it from
    except LdptError as exc:
        raise click.ClickException(f"{metrics_file}: metric {metric!r}: {exc}") from None
    if pair is None:
        if spec.kind is Kind.STRING:
            raise click.UsageError("string metrics need --pair A,B (two strings the device may hold)")
        # a mean metric: the ends of its range, the pair its reports tell apart best
        a, b = spec.bounds if spec.is_mean else (spec.domain[0], spec.domain[1])   # type: ignore[index]
    else:
        parts = pair.split(",")
        if len(parts) != 2 or parts[0] == parts[1]:
            raise click.BadParameter(f"{pair!r}: expected two different values A,B", param_hint="--pair")
        a, b = parts
        if spec.kind is Kind.NUMERIC:   # bucket labels hold a comma: histograms take numbers too
            try:
                a, b = float(a), float(b)
            except ValueError:
                raise click.BadParameter(f"{pair!r}: a numeric metric takes two numbers A,B",
                                         param_hint="--pair") from None
            if spec.is_histogram:
                a, b = (spec.domain[i] for i in bucket_of(spec, [a, b]))   # type: ignore[index]
                if a == b:
                    raise click.BadParameter(f"{pair!r}: both numbers fall in bucket {a}; give numbers "
                                             "in two different buckets", param_hint="--pair")
    rng = np.random.default_rng(seed)
    try:
        rows = [dataclasses.asdict(distinguish(spec, (a, b), t, trials, rng)) for t in reports]
        links = [] if no_link else [dataclasses.asdict(link(s, str(a) if s.kind is Kind.STRING else a, k,
                                                            link_devices))
                                    for s in comparison_specs(spec) for k in link_history
                                    if linkable(s)]
    except LdptError as exc:
        raise click.ClickException(f"{metrics_file}: metric {metric!r}: {exc}") from None
    dist = pd.DataFrame(rows)
    linkdf = pd.DataFrame(links)
    if fmt == "json":
        text = json.dumps({"metric": spec.name, "protocol": spec.protocol, "pair": [a, b],
                           "distinguishing": rows, "linkability": links}, indent=2) + "\n"
    elif fmt == "csv":
        buf = io.StringIO()
        dist.to_csv(buf, index=False)  # floats round-trip exactly (repr)
        if links:
            buf.write("\n")
            linkdf.to_csv(buf, index=False)
        text = buf.getvalue()
    else:
        text = audit_table(spec.name, spec.protocol, (a, b), dist, linkdf)
    emit(text, output)


def audit_table(name: str, protocol: str, pair: tuple[str, str], dist: pd.DataFrame, linkdf: pd.DataFrame) -> str:
    """The human view of both games."""
    import pandas as pd

    shown = pd.DataFrame({
        "reports": dist["reports"],
        "ledger eps": dist["epsilon"].map(lambda v: f"{v:.3g}"),
        "bound": dist["bound"].map(lambda v: f"{v:.4f}"),
        "accuracy": dist["accuracy"].map(lambda v: f"{v:.4f}"),
        "95% interval": [f"[{lo:.4f}, {hi:.4f}]" for lo, hi in zip(dist["ci_low"], dist["ci_high"])],
        "eps proven >=": dist["epsilon_lower_bound"].map(lambda v: f"{v:.3g}"),
    })
    lines = [f"metric {name}  protocol {protocol}  values {pair[0]!r} vs {pair[1]!r}  "
             f"trials {int(dist['trials'].iloc[0])}",
             "distinguishing: the likelihood-ratio attacker guessing the value from T reports",
             shown.to_string(index=False)]
    if len(linkdf):
        lk = pd.DataFrame({
            "protocol": linkdf["protocol"],
            "eps": linkdf["epsilon"].map(lambda v: f"{v:.3g}"),
            "eps inf": linkdf["epsilon_inf"].map(lambda v: "-" if v is None or v != v else f"{v:.3g}"),
            "earlier reports": linkdf["history"],
            "link AUC": linkdf["auc"].map(lambda v: f"{v:.3f}"),
            "re-identified": [f"{r:.1%} of {n}" for r, n in zip(linkdf["reidentified"], linkdf["devices"])],
        })
        lines += ["", "linkability: devices sharing one value; AUC of 'same device?' within a cohort, "
                  "re-identification of a later report among all devices", lk.to_string(index=False)]
    return "\n".join(lines) + "\n"
