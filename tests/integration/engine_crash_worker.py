"""A worker process for the crash test: ``python engine_crash_worker.py STORE LOG SLOW_DELAY_S``.

It executes runs with a RecordingProvider that logs to LOG and spends SLOW_DELAY_S in the
step named ``slow``, with a short lease so a killed worker's run is taken again quickly.
"""

from __future__ import annotations

import asyncio
import sys

from ironflow.engine.runner import Runner
from ironflow.engine.store import open_store
from ironflow.engine.worker import Worker
from ironflow.testing.engine import RecordingProvider


async def main(store_url: str, log_path: str, slow_delay_s: float) -> None:
    store = open_store(store_url)
    await store.open()
    provider = RecordingProvider(log_path=log_path, step_delays={"slow": slow_delay_s})
    try:
        await Worker(store, lambda run: Runner(store, provider), lease_s=0.6, poll_s=0.05).run()
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
