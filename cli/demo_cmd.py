"""`ldpt demo`: the whole system in one command — collector, SDK clients over HTTP, estimates vs truth.

1. writes a demo registry (or uses ``--metrics FILE``) and starts ``ldpt serve`` on a
   temporary SQLite store, on a free port of 127.0.0.1;
2. simulates ``--clients`` app installs. Each is a real ``TelemetryClient`` with its own
   32-byte secret and privacy ledger (kept in memory: ``MemoryState``, so 20,000 clients
   cost no files); they share one uploader, which batches their randomised reports and POSTs
   them over HTTP exactly as an app's SDK does (same encode, ledger, batch and retry code);
3. stops the collector (SIGTERM: it commits what it acknowledged) and prints, per metric,
   the debiased estimates with 95% intervals beside the true counts.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click
import numpy as np

from client_sdk.client import TelemetryClient
from client_sdk.queue import MemoryOutbox
from client_sdk.registry import Kind, MetricSpec, Registry, load_registry
from client_sdk.state import MemoryState
from client_sdk.transport import HTTPTransport
from client_sdk.uploader import RetryPolicy, Uploader
from estimators.simulation import NumericPopulation, draw_population, numeric_truth

from .common import progress_bar
from .estimate_cmd import load_sketch

if TYPE_CHECKING:  # pandas loads only when the demo runs (a fast `ldpt --help`)
    import pandas as pd

#: The demo's metrics: one per kind, with the budgets an app team might pick.
DEMO_REGISTRY = """\
# The registry `ldpt demo` runs with (ldpt demo --keep DIR saves it as DIR/metrics.toml).

[metrics.theme]
kind = "categorical"
categories = ["light", "dark", "system"]
protocol = "auto"
epsilon = 1.0
description = "UI theme chosen in settings"

[metrics.crashed_today]
kind = "boolean"
protocol = "rr"
epsilon = 1.0
description = "Did the app crash today?"

[metrics.country]
kind = "categorical"
protocol = "auto"
epsilon = 2.0
categories = ["AR", "AU", "BR", "CA", "CN", "DE", "EG", "ES", "FR", "GB", "ID", "IN", "IT", "JP",
              "KR", "MX", "NG", "NL", "PL", "RU", "SE", "TR", "US", "ZA", "other"]
description = "Country setting"

[metrics.home_page]
kind = "string"
protocol = "rappor"
bloom_bits = 32
hashes = 2
cohorts = 16
prob_f = 0.25
prob_p = 0.25
prob_q = 0.75
description = "Home page domain (open set of strings, decoded against candidates)"

[metrics.session_minutes]
kind = "numeric"
range = [0, 120]
protocol = "auto"
epsilon = 1.0
description = "Minutes in the session (a mean; values above 120 are clipped on the device)"

[metrics.startup_ms]
kind = "numeric"
range = [0, 5000]
buckets = [0, 250, 500, 750, 1000, 1500, 2000, 3000, 5000]
protocol = "auto"
epsilon = 2.0
description = "Start-up time (a histogram: bucket shares, quantiles and a mean)"
"""

#: True values of the demo's numeric metrics (other numeric metrics: uniform over the range).
DEMO_NUMERIC_DISTRIBUTIONS = {"session_minutes": "exponential:20", "startup_ms": "lognormal:6.5,0.6"}

#: The true strings of the demo's string metric (Zipf weights in this order), plus decoys
#: nobody reports: the decoder must not detect them.
DEMO_STRINGS = ["news.example", "mail.example", "search.example", "video.example", "shop.example",
                "social.example", "maps.example", "music.example", "wiki.example", "bank.example"]
DEMO_DECOYS = ["decoy-1.example", "decoy-2.example", "decoy-3.example"]
#: Reports per HTTP batch, and seconds a report may wait before its batch is sent.
DEMO_BATCH = 500
DEMO_BATCH_AGE = 0.2
SERVER_START_TIMEOUT = 30.0
LISTEN_LINE = re.compile(r"listening on (http://\S+)")


@contextlib.contextmanager
def running_collector(metrics_file: Path, db: Path, log_path: Path) -> Iterator[tuple[str, subprocess.Popen]]:
    """`ldpt serve` on 127.0.0.1, a free port; yields (url, process); SIGTERM on exit."""
    cmd = [sys.executable, "-c", "import sys; from cli.main import main; sys.exit(main())", "serve",
           "--metrics", str(metrics_file), "--db", str(db), "--host", "127.0.0.1", "--port", "0"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDPT_")}
    log = log_path.open("w+", encoding="utf-8")
    proc = subprocess.Popen(cmd, stdout=log, stderr=log, env=env, start_new_session=True)
    try:
        url = wait_for_listen_line(proc, log_path, SERVER_START_TIMEOUT)
        yield url, proc
    finally:
        stop_collector(proc)
        log.close()


def wait_for_listen_line(proc: subprocess.Popen, log_path: Path, timeout: float) -> str:
    """The collector's URL from its 'listening on' line (ClickException if it dies or hangs)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log_path.read_text(encoding="utf-8", errors="replace")
        found = LISTEN_LINE.search(text)
        if found:
            return found.group(1)
        if proc.poll() is not None:
            raise click.ClickException(f"the collector exited with code {proc.returncode}:\n{text.strip()}")
        time.sleep(0.05)
    raise click.ClickException(f"the collector did not start within {timeout:.0f}s (log: {log_path})")


def stop_collector(proc: subprocess.Popen, timeout: float = 20.0) -> int | None:
    """SIGTERM (graceful: commit, exit 0), SIGKILL if it does not stop in time."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def true_values(spec: MetricSpec, clients: int, distribution: str,
                rng: np.random.Generator) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Domain (or demo strings), per-client value indices, and the true count of each value."""
    if spec.kind is Kind.NUMERIC:  # one value per client: values[labels[i]] is client i's number
        population = draw_population(spec, clients, DEMO_NUMERIC_DISTRIBUTIONS.get(spec.name, "uniform"),
                                     rng)
        return list(population.values), np.arange(clients), population.values
    if spec.kind is Kind.STRING:
        values = list(DEMO_STRINGS)
        weights = np.arange(1, len(values) + 1, dtype=np.float64) ** -1.0
        counts = rng.multinomial(clients, weights / weights.sum()).astype(np.int64)
    else:
        population = draw_population(spec, clients, distribution, rng)
        values, counts = population.values, population.counts
    labels = rng.permutation(np.repeat(np.arange(len(values)), counts))
    return values, labels, counts


def drive_clients(registry: Registry, url: str, plan: dict[str, tuple[list[str], np.ndarray]],
                  clients: int, silent: bool) -> tuple[Uploader, float]:
    """One TelemetryClient per simulated install, all sharing one uploader; returns it and the time."""
    reports = clients * len(plan)
    uploader = Uploader(HTTPTransport(url, timeout=30.0), MemoryOutbox(), batch_size=DEMO_BATCH,
                        max_batch_age=DEMO_BATCH_AGE, queue_size=reports + 1,
                        retry=RetryPolicy(initial=0.2, maximum=2.0))
    metrics = [(name, values, labels) for name, (values, labels) in plan.items()]
    start = time.perf_counter()
    with progress_bar(clients, f"{clients:,} clients reporting", silent) as bar:
        step = max(1, clients // 200)
        for i in range(clients):
            client = TelemetryClient(registry=registry, state=MemoryState(), uploader=uploader)
            for name, values, labels in metrics:
                client.report(name, values[labels[i]])
            if (i + 1) % step == 0 or i + 1 == clients:
                bar.update(step if (i + 1) % step == 0 else (i + 1) % step)
    return uploader, time.perf_counter() - start


def wait_acknowledged(uploader: Uploader, reports: int, silent: bool, timeout: float = 60.0) -> bool:
    """Flush the shared uploader, showing acknowledged reports as they come in."""
    done = threading.Event()
    result: list[bool] = []

    def flush() -> None:
        result.append(uploader.flush(timeout))
        done.set()

    threading.Thread(target=flush, daemon=True).start()
    with progress_bar(reports, "acknowledged by the collector", silent) as bar:
        shown = 0
        while not done.wait(0.1):
            acked = uploader.batcher.counters["reports_acked"]
            bar.update(acked - shown)
            shown = acked
        bar.update(uploader.batcher.counters["reports_acked"] - shown)
    return bool(result and result[0])


#: What the demo's output is, before it (two lines) and how to read it, after it.
PREAMBLE = ("Each of {clients:,} simulated app installs randomised its values on the device: the collector "
            "never saw one.\nPer metric: each value's true count beside the collector's estimate from the "
            "randomised reports.\n")
LEGEND = """How to read it:
  epsilon   the privacy cost of one report: smaller is more private, and noisier
  estimate  unbiased: right on average, off by noise in each run; near zero it can even be
            negative (a count of 0 plus noise), which is how an unbiased estimate behaves
  interval  95%: it holds the true value in about 19 runs in 20, so expect about 1 row in 20
            to say covered NO by chance; many more would mean a bug
  covered   whether the interval holds the true value (known here because this is a simulation)
"""


def estimates_vs_truth(spec: MetricSpec, db: Path, values: Sequence[str], counts: np.ndarray) -> pd.DataFrame:
    """The estimate frame with the truth beside it and whether the 95% interval covers it.

    Numeric metrics: ``counts`` holds the true values; the truth of each row (mean, sum, n,
    bucket counts, quantiles) comes from them (estimators.simulation.numeric_truth)."""
    from estimators.frequency import estimate_frame

    sketch = load_sketch(spec, str(db), None, None, None)
    if spec.kind is Kind.NUMERIC:
        df = estimate_frame(spec, sketch)
        truth_of = dict(numeric_truth(spec, NumericPopulation(np.asarray(counts, dtype=np.float64))))
        stats = list(df["statistic"])
        keys = [v if st == "count" else st for st, v in zip(stats, df["value"])] if spec.is_histogram \
            else stats
        df["value"] = keys      # a bucket label or a statistic (mean, sum, n, p50, ...)
        df["truth"] = [truth_of[k] for k in keys]
        df["covered"] = (df["ci_low"] <= df["truth"]) & (df["truth"] <= df["ci_high"])
        return df
    candidates = list(values) + DEMO_DECOYS if spec.kind is Kind.STRING else None
    df = estimate_frame(spec, sketch, candidates=candidates)
    truth = dict(zip(values, (int(c) for c in counts)))
    df.insert(1, "truth", [truth.get(v, 0) for v in df["value"]])
    df["covered"] = (df["ci_low"] <= df["truth"]) & (df["truth"] <= df["ci_high"])
    return df


def format_result(spec: MetricSpec, df: pd.DataFrame) -> str:
    """One metric's block: a header, then value / truth / estimate [interval] / covered."""
    proto = spec.protocol_impl
    eps = f"epsilon {proto.epsilon:.3g} per report"
    if proto.epsilon_longitudinal is not None:
        eps += f", {proto.epsilon_longitudinal:.3g} for any number of reports of one value"
    n = int(df.attrs.get("n_reports", 0))
    covered = int(df["covered"].sum())
    head = (f"{spec.name} ({spec.kind.value}, {spec.protocol}, {eps}): {n:,} reports; "
            f"{covered} of {len(df)} true counts inside their 95% interval")
    import pandas as pd

    from .output import format_number

    what = "true values" if spec.kind is Kind.NUMERIC else "true counts"
    head = head.replace("true counts", what)
    num = format_number if spec.kind is Kind.NUMERIC else (lambda v: f"{v:,.0f}")
    shown = pd.DataFrame({
        "value": df["value"],
        "truth": df["truth"].map(lambda v: f"{v:,}" if spec.kind is not Kind.NUMERIC else format_number(v)),
        "estimate": df["estimate"].map(num),
        "95% interval": [f"[{num(lo)}, {num(hi)}]" for lo, hi in zip(df["ci_low"], df["ci_high"])],
        "covered": df["covered"].map(lambda b: "yes" if b else "NO"),
    })
    if "detected" in df and spec.kind is Kind.STRING:
        shown["detected"] = df["detected"].map(lambda b: "yes" if b else "")
    return head + "\n" + shown.to_string(index=False) + "\n"


@click.command()
@click.option("--clients", type=click.IntRange(min=1), default=20_000, show_default=True,
              help="Simulated app installs, each a TelemetryClient with its own secret and ledger.")
@click.option("--metric", "metric_names", multiple=True,
              help="Metric to report (repeatable; default: every metric of the registry).")
@click.option("--metrics", "metrics_file", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Registry to use instead of the built-in demo registry.")
@click.option("--distribution", default="zipf:1.1", show_default=True,
              help="True values: zipf:S, uniform, geometric:P or csv:PATH (as in ldpt simulate); "
                   "numeric metrics draw exponential:20 (session_minutes), lognormal:6.5,0.6 "
                   "(startup_ms) or uniform over their range.")
@click.option("--seed", type=int, default=None, help="Seed of the true values (default: fresh, printed).")
@click.option("--keep", "keep_dir", type=click.Path(file_okay=False), default=None,
              help="Keep the registry, store and collector log in this directory (ldpt estimate --db works on it).")
@click.option("--silent", is_flag=True, help="No progress bars.")
def demo(clients: int, metric_names: tuple[str, ...], metrics_file: str | None, distribution: str,
         seed: int | None, keep_dir: str | None, silent: bool) -> None:
    """Run a collector, drive CLIENTS simulated apps through the real SDK over HTTP, print estimates vs truth."""
    t0 = time.perf_counter()
    workdir = Path(keep_dir) if keep_dir else Path(tempfile.mkdtemp(prefix="ldpt-demo-"))
    if keep_dir and (workdir / "ldpt.sqlite").exists():  # its reports would add to this run's
        raise click.ClickException(f"{workdir}: holds the store of an earlier demo (ldpt.sqlite), "
                                   "whose reports would be mixed into this run's estimates; "
                                   "choose a new --keep directory or delete that one")
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        registry_path = workdir / "metrics.toml"
        if metrics_file:
            shutil.copyfile(metrics_file, registry_path)
        else:
            registry_path.write_text(DEMO_REGISTRY, encoding="utf-8")
        registry = load_registry(registry_path)
        names = list(metric_names) or [m.name for m in registry]
        specs = [registry.get(name) for name in names]
        if seed is None:
            seed = int(np.random.SeedSequence().entropy % (2**63))
        rng = np.random.default_rng(seed)
        truth = {spec.name: true_values(spec, clients, distribution, rng) for spec in specs}
        plan = {name: (values, labels) for name, (values, labels, _) in truth.items()}
        db = workdir / "ldpt.sqlite"
        with running_collector(registry_path, db, workdir / "collector.log") as (url, proc):
            if not silent:
                click.echo(f"collector: {url} (store {db})", err=True)
            uploader, elapsed = drive_clients(registry, url, plan, clients, silent)
            ok = wait_acknowledged(uploader, clients * len(specs), silent)
            counters = dict(uploader.batcher.counters)
            uploader.close(5.0)
            code = stop_collector(proc)
        if not ok:
            raise click.ClickException(f"not every report was acknowledged (uploader counters: {counters}); "
                                       f"see {workdir / 'collector.log'}")
        if code not in (0, None):
            raise click.ClickException(f"the collector exited with code {code}; see {workdir / 'collector.log'}")
        blocks = [format_result(spec, estimates_vs_truth(spec, db, truth[spec.name][0], truth[spec.name][2]))
                  for spec in specs]
        total = time.perf_counter() - t0
        click.echo(PREAMBLE.format(clients=clients))
        click.echo("\n".join(blocks))
        click.echo(LEGEND)
        click.echo(f"{clients:,} clients sent {counters['reports_acked']:,} randomised reports in "
                   f"{counters['batches_acked']:,} batches (clients created and reporting for {elapsed:.1f}s); "
                   f"{total:.1f}s in all; seed {seed}" + (f"; kept in {workdir}" if keep_dir else ""))
    finally:
        if not keep_dir:
            shutil.rmtree(workdir, ignore_errors=True)
