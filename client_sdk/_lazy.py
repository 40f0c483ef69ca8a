"""logging, imported on first use: an app's start-up never pays for it (docs/design.md).

``from client_sdk._lazy import logging`` gives an object that stands for the logging module and
imports it the first time an attribute is read; ``LazyLogger(name)`` stands for
``logging.getLogger(name)``. The SDK logs only on trouble, so a device that builds a client and
reports never imports logging. (The numpy proxy that once lived here went with the last
vectorised path of the SDK, issue 29: no module of the SDK wheel names numpy.)
"""

from __future__ import annotations

import importlib
from typing import Any


class _LazyLogging:
    """``logging``, imported the first time an attribute is read (``logging.WARNING``, ...).

    The SDK logs only on trouble (a full queue, a refused batch, a failed fetch); importing
    logging costs ~5 ms of every app's start-up (traceback, string, ...), so it waits for the
    first message. Each attribute read is then cached on this object (functions and level
    constants).
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


__all__ = ["LazyLogger", "logging"]
