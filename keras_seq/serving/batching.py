"""Gathers the items of concurrent requests into few engine calls, on one worker thread.

One decoding call of many sentences keeps the hardware busier than many calls of
one, so the `RequestBatcher` holds each request for at most `wait_seconds` after
the first waiting one arrived (taking also every request that queued while the
engine was busy, and waiting no longer once one key holds a full call), puts the
items that share a key (their decoding options) into one list, sorts it by
length (so the sentences of one call pad to similar lengths), cuts it into calls
of at most `max_batch_items` and runs them one after another on a single worker
thread, so the event loop keeps accepting requests meanwhile. Each request gets
its results back in its own order; an exception of a call fails only the
requests with an item in that call. Warm-up calls, given at construction, run
first on the same thread, their results dropped; requests that come meanwhile
wait for them.
"""

import asyncio
import concurrent.futures
import dataclasses
import logging

logger = logging.getLogger("keras_seq.serving")


class BatcherClosed(RuntimeError):
    """A request came after `RequestBatcher.close` began."""


class BatchFailed(RuntimeError):
    """The engine raised on a call holding one of this request's items (the engine's exception is the cause)."""


@dataclasses.dataclass(eq=False)
class _Waiting:
    """One request in the queue: its items, its key, the future its handler awaits and what has come back."""

    items: list
    key: object
    future: asyncio.Future
    arrived: float
    results: list = None
    missing: int = 0

    def __post_init__(self):
        self.results = [None] * len(self.items)
        self.missing = len(self.items)


_CLOSE = object()  # put in the queue by `close`: the collector decodes what came before it, then ends


class RequestBatcher:
    """Batches `submit(items, key)` calls into `run_batch(items, key) -> results` calls (one result per item).

    `run_batch` is blocking (an engine's call) and runs on a worker thread of its
    own, one call at a time. `length(item)` orders the items of a call (shortest
    first). `start` must be called from the running event loop before `submit`;
    `close` lets every submitted request finish, then stops the worker.
    `warm_up`: `(items, key)` calls run before any request's (see `_warm_up`);
    `warming` is true until they have ended.
    """

    def __init__(self, run_batch, wait_seconds, max_batch_items, length=len, warm_up=()):
        if max_batch_items < 1:
            raise ValueError(f"RequestBatcher: max_batch_items expected a positive integer, got {max_batch_items}")
        self.run_batch, self.wait_seconds, self.max_batch_items, self.length = (
            run_batch,
            max(wait_seconds, 0.0),
            max_batch_items,
            length,
        )
        self.engine_calls = 0
        self.warm_up, self.warmed, self.warming = list(warm_up), 0, bool(warm_up)
        self._queue = None
        self._collector = None
        self._closing = None  # the task of `close`, once it began
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="keras-seq-engine")

    def start(self):
        """Start collecting requests on the running event loop."""
        self._queue = asyncio.Queue()
        self._collector = asyncio.get_running_loop().create_task(self._collect(), name="keras-seq-batcher")

    async def submit(self, items, key=None):
        """The results of `items` (a list, in its order), decoded in calls with the other requests of the same `key`.

        Raises `BatchFailed` when the engine raised on a call holding one of
        the items, `BatcherClosed` once `close` has begun.
        """
        if self._collector is None:
            raise BatcherClosed("the batcher was not started")
        if self._closing is not None:
            raise BatcherClosed("the server is shutting down")
        if self._collector.done():  # ended by a fault its loop could not catch (logged): no request would be answered
            raise BatcherClosed("the batcher has stopped")
        if not items:
            return []
        loop = asyncio.get_running_loop()
        waiting = _Waiting(list(items), key, loop.create_future(), loop.time())
        self._queue.put_nowait(waiting)
        return await waiting.future

    async def close(self):
        """Refuse new requests, finish every one submitted before, then stop the worker thread (a second call
        waits for the first to end)."""
        if self._closing is None:
            self._closing = asyncio.get_running_loop().create_task(self._drain())
        await self._closing

    async def _drain(self):
        if self._collector is not None:
            self._queue.put_nowait(_CLOSE)
            await self._collector
        await asyncio.get_running_loop().run_in_executor(None, self._executor.shutdown, True)

    async def _warm_up(self):
        """Run the warm-up calls one after another, dropping their results, until they end, one fails or `close`
        begins: they compile what the first requests would otherwise wait for."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        logger.info("warming up: %d engine calls before the first request ...", len(self.warm_up))
        try:
            for items, key in self.warm_up:
                if self._closing is not None:
                    break
                await loop.run_in_executor(self._executor, self.run_batch, items, key)
                self.warmed += 1
        except Exception:  # the server still serves: its requests compile what the warm-up did not
            logger.exception("the warm-up failed on a call of %d items", len(items))
        finally:
            self.warming = False
        logger.info("warmed up: %d of %d calls in %.1f s", self.warmed, len(self.warm_up), loop.time() - started)

    async def _collect(self):
        """Run the warm-up, then take a batch of waiting requests, decode it, again, until `close`."""
        if self.warming:
            await self._warm_up()
        ended = False
        while not ended:
            batch, ended = await self._gather()
            try:
                await self._decode(batch)
            except Exception as error:  # a fault here must not stop the server: fail this batch's requests
                logger.exception("the batcher failed on a batch")
                for waiting in batch:
                    if not waiting.future.done():
                        waiting.future.set_exception(BatchFailed(f"{type(error).__name__}: {error}"))

    async def _gather(self):
        """The first waiting request and those that come until `wait_seconds` after it (or are already there),
        stopping early once one key holds `max_batch_items` items; and whether `close` was met."""
        loop = asyncio.get_running_loop()
        first = await self._queue.get()
        if first is _CLOSE:
            return [], True
        batch, counts = [first], {first.key: len(first.items)}
        deadline = first.arrived + self.wait_seconds
        while max(counts.values()) < self.max_batch_items:
            if self._queue.empty():
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    waiting = await asyncio.wait_for(self._queue.get(), remaining)
                except asyncio.TimeoutError:
                    break
            else:
                waiting = self._queue.get_nowait()
            if waiting is _CLOSE:
                return batch, True
            batch.append(waiting)
            counts[waiting.key] = counts.get(waiting.key, 0) + len(waiting.items)
        return batch, False

    async def _decode(self, batch):
        """Run the calls of `batch` one after another; each request's future is set once its last item is back."""
        loop = asyncio.get_running_loop()
        by_key = {}
        for waiting in batch:
            by_key.setdefault(waiting.key, []).extend((waiting, index) for index in range(len(waiting.items)))
        for key, entries in by_key.items():
            entries.sort(key=lambda entry: self.length(entry[0].items[entry[1]]))  # stable: ties keep their order
            for start in range(0, len(entries), self.max_batch_items):
                call = entries[start : start + self.max_batch_items]
                requests = list({id(waiting): waiting for waiting, _ in call}.values())
                if all(waiting.future.done() for waiting in requests):  # failed in an earlier call, or cancelled
                    continue
                items = [waiting.items[index] for waiting, index in call]
                self.engine_calls += 1
                try:
                    results = await loop.run_in_executor(self._executor, self.run_batch, items, key)
                    results = list(results)
                    if len(results) != len(items):
                        raise ValueError(f"the engine gave {len(results)} results for {len(items)} items")
                except Exception as error:
                    logger.exception("the engine failed on a call of %d items", len(items))
                    for waiting in requests:
                        if not waiting.future.done():
                            waiting.future.set_exception(BatchFailed(f"{type(error).__name__}: {error}"))
                    continue
                for (waiting, index), result in zip(call, results):
                    waiting.results[index] = result
                    waiting.missing -= 1
                for waiting in requests:
                    if waiting.missing == 0 and not waiting.future.done():
                        waiting.future.set_result(waiting.results)
