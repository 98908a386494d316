"""One shared list+watch per (API client, resource, namespace), serving every in-flight step.

An :class:`Informer` keeps a cache of the objects of one resource in one namespace, fed by a
single watch, and wakes the waiters whose predicate became true. It starts on first use and
stops when its last user leaves (reference counting), so a process holds exactly one watch
connection per namespace however many steps wait in it; ``informer_for`` is the registry
that guarantees this. A 410 Gone re-lists (the API layer does it) and the cache is replaced;
objects missing from the new list count as deleted.

It never polls, and never creates, changes or deletes anything: it only reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from ironflow import errors
from ironflow.kube import api

__all__ = ["Informer", "PodInformer", "informer_for"]

Predicate = Callable[[api.KubeObject], bool]


@dataclass(eq=False)
class _Waiter:
    name: str
    predicate: Predicate | None  # None: waiting for deletion
    uid: str | None
    #: The API showed the object while the cache did not (yet): absence proves nothing then.
    present: bool = False
    future: asyncio.Future[api.KubeObject | None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class Informer:
    """A cache of one resource in one namespace, kept current by one watch.

    Use :meth:`wait_for` and :meth:`wait_deleted` (each holds a reference while it waits), or
    hold the informer across several waits with ``async with informer.hold():`` so the watch
    stays open between them. ``linger_s`` keeps the watch open that long after the last user
    leaves, so back-to-back steps do not re-list.
    """

    def __init__(
        self,
        kube: api.KubeApi,
        resource: api.Resource,
        namespace: str,
        *,
        label_selector: str | None = None,
        linger_s: float = 0.0,
    ) -> None:
        self.api = kube
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.linger_s = linger_s
        self._cache: dict[str, api.KubeObject] = {}
        self._waiters: dict[str, set[_Waiter]] = {}
        self._users = 0
        self._task: asyncio.Task[None] | None = None
        self._synced: asyncio.Event = asyncio.Event()
        self._failure: BaseException | None = None
        self._linger: asyncio.TimerHandle | None = None
        #: Times the informer (re-)listed: once at start, once per 410.
        self.relists = 0

    def __repr__(self) -> str:
        return f"Informer({self.resource.plural} in {self.namespace!r}, users={self._users})"

    # -- lifecycle --

    @property
    def running(self) -> bool:
        """Whether the watch task is alive."""
        return self._task is not None and not self._task.done()

    @property
    def users(self) -> int:
        """How many holders and waiters use the informer now."""
        return self._users

    def _acquire(self) -> None:
        self._users += 1
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        if not self.running:
            self._failure = None
            self._synced = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"informer {self!r}")

    async def _release(self) -> None:
        self._users -= 1
        if self._users > 0:
            return
        if self.linger_s > 0:
            self._linger = asyncio.get_running_loop().call_later(self.linger_s, self._stop_idle)
        else:
            await self.stop()

    def _stop_idle(self) -> None:
        self._linger = None
        if self._users == 0 and self._task is not None:
            self._task.cancel()
            self._task = None

    @contextlib.asynccontextmanager
    async def hold(self) -> AsyncIterator[Informer]:
        """Keep the watch open for the duration of the block (reference counted)."""
        self._acquire()
        try:
            yield self
        finally:
            await self._release()

    async def stop(self) -> None:
        """Stop the watch now, whoever still uses it; waiters get ``KubeUnavailable``."""
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._failure = errors.KubeUnavailable(f"the {self.resource.plural} informer of {self.namespace} stopped")
        self._fail_waiters(self._failure)

    # -- reading --

    def get(self, name: str) -> api.KubeObject | None:
        """The cached object (no request), or None."""
        return self._cache.get(name)

    def cached(self) -> list[api.KubeObject]:
        """Every cached object."""
        return list(self._cache.values())

    async def wait_synced(self) -> None:
        """Wait until the first list has filled the cache (starts the informer if needed)."""
        async with self.hold():
            await self._wait_synced()

    async def _wait_synced(self) -> None:
        if self._synced.is_set():
            # No yield when already synced: a waiter registers in the same step as it checked the
            # cache, so no event (a DELETED, say) can land between the two and be missed.
            return
        task = self._task
        synced = asyncio.ensure_future(self._synced.wait())
        try:
            if task is None:
                await synced
                return
            done, _ = await asyncio.wait({synced, task}, return_when=asyncio.FIRST_COMPLETED)
            if synced not in done:
                raise self._failure or errors.KubeUnavailable("the informer stopped before its first list")
        finally:
            synced.cancel()

    async def wait_for(
        self,
        name: str,
        predicate: Predicate,
        timeout: float | None,  # noqa: ASYNC109 - the interface other modules call
        *,
        uid: str | None = None,
    ) -> api.KubeObject | None:
        """The object once ``predicate(object)`` holds; None after ``timeout`` seconds.

        Raises ``KubeNotFound`` when the object is deleted first (unless its last state
        satisfies the predicate), and the watch's error when the watch fails for good.
        """
        return await self._wait(_Waiter(name, predicate, uid), timeout)

    async def wait_deleted(
        self,
        name: str,
        uid: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 - the interface other modules call
    ) -> bool:
        """True once no object ``name`` (with ``uid``, if given) exists; False after ``timeout``."""
        try:
            await self._wait(_Waiter(name, None, uid), timeout)
        except TimeoutError:
            return False
        return True

    async def _wait(self, waiter: _Waiter, timeout: float | None) -> api.KubeObject | None:  # noqa: ASYNC109
        async with self.hold():
            was_synced = self._synced.is_set() and self.running
            try:
                async with asyncio.timeout(timeout):
                    await self._wait_synced()
                    if not self.running:
                        # Stopped (or failed) between our hold and now: nothing will wake this waiter.
                        raise self._failure or errors.KubeUnavailable(f"the {self.resource.plural} informer stopped")
                    self._waiters.setdefault(waiter.name, set()).add(waiter)
                    cached = self._cache.get(waiter.name)
                    if (
                        was_synced
                        and waiter.predicate is None
                        and waiter.uid is not None
                        and not _has_uid(cached, waiter.uid)
                    ):
                        # The cache may lag behind what the caller just read from the API: ask once.
                        # The waiter is registered first, so a DELETED event during the GET counts.
                        waiter.present = True
                        if not await self._exists(waiter.name, waiter.uid) and not waiter.future.done():
                            waiter.future.set_result(None)
                    else:
                        self._check(waiter, cached, deleted=False)
                    return await waiter.future
            except TimeoutError:
                if waiter.predicate is None:
                    raise
                return None
            finally:
                waiters = self._waiters.get(waiter.name)
                if waiters is not None:
                    waiters.discard(waiter)
                    if not waiters:
                        del self._waiters[waiter.name]

    async def _exists(self, name: str, uid: str) -> bool:
        try:
            obj = await self.api.get(self.resource, self.namespace, name)
        except errors.KubeNotFound:
            return False
        return _has_uid(obj, uid)

    # -- the watch --

    async def _run(self) -> None:
        try:
            async with contextlib.aclosing(
                self.api.watch(self.resource, self.namespace, label_selector=self.label_selector)
            ) as events:
                async for event in events:
                    self._apply(event)
        except asyncio.CancelledError:
            raise
        except errors.IronflowError as exc:
            self._failure = exc
            self._fail_waiters(exc)
        except Exception as exc:  # an unexpected failure must still wake every waiter
            failure = errors.KubeUnavailable(f"the {self.resource.plural} informer failed: {exc!r}")
            failure.__cause__ = exc
            self._failure = failure
            self._fail_waiters(failure)

    def _apply(self, event: api.WatchEvent) -> None:
        if event.type == "RELISTED":
            self.relists += 1
            fresh = {obj["metadata"]["name"]: _slim(obj) for obj in event.items}
            vanished = [obj for name, obj in self._cache.items() if name not in fresh]
            self._cache = fresh
            self._synced.set()
            for obj in vanished:
                self._notify(obj, deleted=True)
            for obj in fresh.values():
                self._notify(obj, deleted=False)
            for waiters in list(self._waiters.values()):  # a fresh list is newer than any GET
                for waiter in list(waiters):
                    if waiter.present:
                        waiter.present = False
                        self._check(waiter, fresh.get(waiter.name), deleted=False)
            return
        name = event.object.get("metadata", {}).get("name", "")
        if event.type == "DELETED":
            self._cache.pop(name, None)
            self._notify(event.object, deleted=True)
        else:
            self._cache[name] = _slim(event.object)
            self._notify(event.object, deleted=False)

    def _notify(self, obj: api.KubeObject, *, deleted: bool) -> None:
        for waiter in list(self._waiters.get(obj["metadata"]["name"], ())):
            self._check(waiter, obj, deleted=deleted)

    @staticmethod
    def _check(waiter: _Waiter, obj: api.KubeObject | None, *, deleted: bool) -> None:
        if waiter.future.done():
            return
        uid_matches = obj is not None and (waiter.uid is None or obj["metadata"].get("uid") == waiter.uid)
        if waiter.predicate is None:  # waiting for deletion
            if waiter.present and not deleted:
                return  # the cache has not caught up with the API yet: only a DELETED event counts
            if obj is None and not deleted:
                waiter.future.set_result(None)  # synced and absent: already gone
            elif obj is not None and not deleted and waiter.uid is not None and not uid_matches:
                waiter.future.set_result(None)  # a newer object took the name: ours is gone
            elif deleted and uid_matches:
                waiter.future.set_result(None)
            return
        if obj is None or not uid_matches:
            return
        if waiter.predicate(obj):
            waiter.future.set_result(obj)
        elif deleted:
            waiter.future.set_exception(
                errors.KubeNotFound(
                    f"{waiter.name} ({obj.get('kind', 'object')}) was deleted while waiting for it", status=404
                )
            )

    def _fail_waiters(self, exc: BaseException) -> None:
        for waiters in self._waiters.values():
            for waiter in waiters:
                if not waiter.future.done():
                    waiter.future.set_exception(exc)


def _slim(obj: api.KubeObject) -> api.KubeObject:
    """Drop ``metadata.managedFields`` (often the larger half of an object, never read here), so
    a cache of hundreds of pods stays small."""
    obj.get("metadata", {}).pop("managedFields", None)
    return obj


def _has_uid(obj: api.KubeObject | None, uid: str) -> bool:
    return obj is not None and obj.get("metadata", {}).get("uid") == uid


class PodInformer(Informer):
    """The pods of one namespace: what every step of that namespace waits on."""

    def __init__(
        self, kube: api.KubeApi, namespace: str, *, label_selector: str | None = None, linger_s: float = 0.0
    ) -> None:
        super().__init__(kube, api.PODS, namespace, label_selector=label_selector, linger_s=linger_s)


_registry: weakref.WeakKeyDictionary[api.KubeApi, dict[tuple[api.Resource, str], Informer]] = (
    weakref.WeakKeyDictionary()
)


def informer_for(
    kube: api.KubeApi, namespace: str, resource: api.Resource = api.PODS, *, linger_s: float = 0.0
) -> Informer:
    """The process's one informer for ``resource`` in ``namespace`` on this API client.

    Every caller of the same (client, resource, namespace) gets the same instance, hence one
    watch connection. ``linger_s`` applies when the informer is first made.
    """
    informers = _registry.setdefault(kube, {})
    key = (resource, namespace)
    informer = informers.get(key)
    if informer is None:
        if resource == api.PODS:
            informer = PodInformer(kube, namespace, linger_s=linger_s)
        else:
            informer = Informer(kube, resource, namespace, linger_s=linger_s)
        informers[key] = informer
        kube.on_close(informer.stop)  # closing the client ends the watch (no task outlives it)
    return informer
