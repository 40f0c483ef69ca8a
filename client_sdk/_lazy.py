"""numpy, imported on first use: the SDK's one-report path runs without it (docs/design.md).

``from client_sdk._lazy import np`` gives an object that stands for the numpy module and
imports it the first time an attribute is read (``np.asarray``, ``np.int64``, ...). The
vectorised paths (simulation, collector, estimators) touch it and load numpy as before; a
device that only builds a client and reports never does, so an app that installs the
``ldp-telemetry-sdk`` distribution alone (msgpack is its one dependency) never needs numpy.
Module-level code must not read an attribute of it (tests/test_layering.py checks the
import and a report of every metric kind in a fresh interpreter).
"""

from __future__ import annotations

import importlib
from typing import Any


class _LazyNumpy:
    """Attribute access imports numpy once; each attribute read is then cached on this object."""

    __slots__ = ("__dict__",)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)  # copy/pickle/inspect probes must not import numpy
        value = getattr(importlib.import_module("numpy"), name)
        setattr(self, name, value)  # later reads are plain attribute look-ups
        return value

    def __repr__(self) -> str:
        return "<numpy, imported on first use>"


np: Any = _LazyNumpy()


class _LazyLogging:
    """``logging``, imported the first time an attribute is read (``logging.WARNING``, ...).

    The SDK logs only on trouble (a full queue, a refused batch, a failed fetch); importing
    logging costs ~5 ms of every app's start-up (traceback, string, ...), so it waits for the
    first message. Attribute reads are cached like ``np``'s (functions and level constants).
    """

    __slots__ = ("__dict__",)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = getattr(importlib.import_module("logging"), name)
        setattr(self, name, value)
        return value

    def __repr__(self) -> str:
        return "<logging, imported on first use>"


logging: Any = _LazyLogging()


class LazyLogger:
    """Stands for ``logging.getLogger(name)``, created on the first attribute read and used
    directly from then on (its level, handlers and methods are the logger's own, never copied)."""

    __slots__ = ("_name", "_logger")

    def __init__(self, name: str) -> None:
        self._name = name
        self._logger: Any = None

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        logger = self._logger
        if logger is None:
            logger = self._logger = logging.getLogger(self._name)
        return getattr(logger, attr)

    def __repr__(self) -> str:
        return f"<logger {self._name!r}, created on first use>"


__all__ = ["LazyLogger", "logging", "np"]
