"""`ldpt shuffle`: an anonymising shuffler for sealed reports (issue 28 §2).

A separate service, meant to be run by a party other than the collector's operator (the
Prochlo/ESA "shuffle" role: Bittau et al., SOSP 2017). Devices in shuffler mode
(``Seal.shuffler(url)``) POST their sealed batches here; the shuffler can read none of them. It
stores each envelope durably, then acknowledges it (the SDK settles on that acknowledgement:
docs/wire-format.md, "The shuffler's contract"); keeps no address, header or arrival time;
and forwards the envelopes to the collector only in uniformly shuffled batches of at least
``min_batch``, authenticated with a bearer token, deleting them once the collector has
acknowledged its commit. The collector then records, per window, the crowd each report hid in
(collector/shuffled.py), from which the central (ε, δ) is computed (estimators/amplification.py).

Modules: ``config`` (settings), ``pool`` (the durable SQLite pool, Fisher–Yates),
``app`` (HTTP routes), ``forwarder`` (when and how batches go), ``telemetry`` (/metrics),
``server`` (run until SIGTERM).
"""
