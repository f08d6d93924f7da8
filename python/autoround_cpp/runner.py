"""Runs one engine call on a worker thread: its log lines go to the ``autoround_cpp`` logger, its
progress to a tqdm bar (when tqdm is installed) or to the logger, and Ctrl-C stops it cleanly.

The engine releases the GIL, so the calling thread waits in short joins and receives
KeyboardInterrupt as usual; it then cancels the run, which unwinds at its next block start or tuning
iteration and removes its temporary output, and the KeyboardInterrupt is raised again.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any, Callable

from . import _core

logger = logging.getLogger("autoround_cpp")

# core/log.h's levels: Debug, Info, Warn, Error.
_LEVELS = (logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR)


def ensure_handler() -> None:
    """Lines at INFO reach stderr as auto_round's do, unless the program configured logging itself."""
    if logger.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(levelname)s] %(message)s"))
    logger.addHandler(handler)
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)


def _line(level: int, message: str) -> None:
    logger.log(_LEVELS[min(max(level, 0), 3)], message)


class _Progress:
    """Block and iteration events: a tqdm bar over the blocks, or a log line every 10 s."""

    def __init__(self) -> None:
        self._bar = None
        self._last = 0.0
        try:
            from tqdm.auto import tqdm  # optional
        except ImportError:
            tqdm = None
        self._tqdm = tqdm

    def __call__(self, block: int, blocks: int, it: int, iters: int, loss: float, best: float) -> None:
        if self._tqdm is not None:
            if self._bar is None:
                self._bar = self._tqdm(total=blocks, unit="block", desc="autoround", leave=True)
            self._bar.n = round(block + (it / iters if iters else 0), 3)
            if iters:
                self._bar.set_postfix(iter=f"{it}/{iters}", loss=f"{loss:.4g}", best=f"{best:.4g}", refresh=False)
            self._bar.refresh()
            return
        now = time.monotonic()
        if iters and now - self._last >= 10:
            self._last = now
            logger.info("block %d/%d iter %d/%d loss %.4g best %.4g", block + 1, blocks, it, iters, loss, best)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def run(call: Callable[..., Any], *args: Any) -> Any:
    """``call(*args, bridge)`` on a worker thread; returns its result or raises its exception."""
    ensure_handler()
    progress = _Progress()
    bridge = _core.LogBridge(_line, progress)
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def work() -> None:
        try:
            outcome["value"] = call(*args, bridge)
        except BaseException as e:  # handed to the calling thread
            outcome["error"] = e
        finally:
            done.set()

    # An Event, not Thread.join: a join interrupted by KeyboardInterrupt marks a running thread as
    # stopped on Python <= 3.12 (its is_alive() turns False while the engine still writes).
    threading.Thread(target=work, name="autoround_cpp", daemon=True).start()
    interrupted = False
    while not done.is_set():
        try:
            done.wait(0.1)
        except KeyboardInterrupt:
            if not interrupted:
                logger.warning("interrupted: stopping at the next block or iteration, removing the temporary output")
            interrupted = True
            bridge.cancel()  # further Ctrl-C waits too: leaving now could leave a partial output
    progress.close()
    if interrupted:
        raise KeyboardInterrupt
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
