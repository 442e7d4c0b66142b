"""Training batches made and put on the device by a background thread, a few steps ahead of the one in use, so the
host's work (sampling, decoding, copying) overlaps the device's instead of adding to each step."""

import queue
import threading
from collections.abc import Callable

_DONE = object()


class DevicePrefetch:
    """Yields ``make_batch(step)`` (a batch on the devices, e.g. ``distributed.GlobalBatches``) for steps start,
    start + 1, ... end - 1, made ``depth`` steps ahead on a daemon thread. An exception in the thread (e.g. an
    unreadable image) is raised by ``next`` in the caller's thread. Batches are pure functions of the step, so making
    them early changes nothing."""

    def __init__(self, make_batch: Callable[[int], dict], start: int, end: int, depth: int = 2):
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(make_batch, start, end), name="batch-prefetch", daemon=True
        )
        self._thread.start()

    def _put(self, item) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self, make_batch: Callable[[int], dict], start: int, end: int) -> None:
        try:
            for step in range(start, end):
                if not self._put((step, make_batch(step))):
                    return
        except BaseException as err:  # handed to the consumer, which raises it
            self._put((None, err))
            return
        self._put((None, _DONE))

    def next(self, step: int) -> dict:
        """The batch of ``step`` (steps must be asked for in order)."""
        got, item = self._queue.get()
        if got is None:
            if item is _DONE:
                raise RuntimeError(f"batch prefetch ended before step {step}")
            raise item
        if got != step:
            raise RuntimeError(f"batch prefetch out of order: asked for step {step}, got {got}")
        return item

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
