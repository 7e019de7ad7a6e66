"""GRPO's async mode (`max_staleness` > 0): draws made ahead of the trainer by a producer
thread, so generation overlaps the update; staleness admission (`grpo_draws.admit`) bounds
how far behind the weights that sampled a group may be."""
from __future__ import annotations

import queue
import threading
from typing import Any, Callable, Mapping

from rlvr.engines.base import WeightSource
from rlvr.train.grpo_draws import Draw


class DrawProducer:
    """Async mode (max_staleness > 0): a thread makes draws ahead of the trainer into a
    bounded queue (`queue_size` draws), so generation overlaps the update. New weights are
    handed over with `publish` and loaded into the sampler between draws (never during
    one), so every group comes from one policy version, which its rows record."""

    def __init__(self, make: Callable[[int], Draw], engine, start: int, queue_size: int):
        self.make, self.engine = make, engine
        self.queue: queue.Queue = queue.Queue(maxsize=queue_size)
        self.stop = threading.Event()
        self.pending: tuple | None = None
        self.pending_lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, args=(start,), name="grpo-producer",
                                       daemon=True)
        self.thread.start()

    def publish(self, source: WeightSource, version: str, step: int) -> None:
        """Hand over the weights of `version` (a state dict is copied now: the trainer
        goes on updating it in place; a directory is already a snapshot)."""
        if isinstance(source, Mapping):
            source = {k: v.detach().clone() for k, v in source.items()}
        with self.pending_lock:
            self.pending = (source, version, step)

    def _run(self, index: int) -> None:
        try:
            while not self.stop.is_set():
                with self.pending_lock:
                    pending, self.pending = self.pending, None
                if pending is not None:
                    self.engine.sync_weights(*pending)
                item: Any = self.make(index)
                index += 1
                while not self.stop.is_set():
                    try:
                        self.queue.put(item, timeout=0.2)
                        break
                    except queue.Full:
                        continue
        except BaseException as exc:  # handed to the trainer, which re-raises it
            self.queue.put(exc)

    def next(self, index: int) -> Draw:
        item = self.queue.get()
        if isinstance(item, BaseException):
            raise item
        if item.index != index:
            raise RuntimeError(f"async producer delivered draw {item.index}, expected {index}")
        return item

    def close(self) -> None:
        self.stop.set()
        while self.thread.is_alive():
            try:
                self.queue.get(timeout=0.2)
            except queue.Empty:
                pass
        self.thread.join()
