"""Exhaustive runs on a Dask cluster: `verify-construction ... --dask [SCHEDULER]`.

SCHEDULER is `local` (a LocalCluster of worker processes on this machine; the default when
--dask is given without a value) or the address of a running Dask distributed scheduler
(`tcp://host:8786`), which is how a university cluster runs it: start a scheduler and workers
with dask-jobqueue (Slurm, PBS, SGE, ...) on the cluster, with depthcert installed in the
workers' environment, and pass the scheduler's address.

Only execution happens here: the chunks are checkers.shards.run_chunk on index ranges, and the
merge that makes the verdict (index order, first failure, minimum margin up to it) is the
kernel's (checkers/shards.py), identical to a single-process run.  Dask is an optional extra:
`pip install -e ".[cluster]"`.
"""
from __future__ import annotations

import os

from depthcert.checkers.errors import BadInput

INSTALL_HINT = 'the --dask option needs the cluster extra: pip install -e ".[cluster]"'


class DaskRunner:
    """checkers.shards runner on a Dask distributed client (results yielded in job order)."""

    def __init__(self, scheduler: str | None = None, workers: int | None = None):
        try:
            from dask.distributed import Client, LocalCluster
        except ImportError:
            raise BadInput(INSTALL_HINT) from None
        self.scheduler = scheduler or "local"
        self._cluster = None
        try:
            if self.scheduler == "local":
                n = workers or os.cpu_count() or 1
                self._cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                             dashboard_address=None, silence_logs=50)
                self.client = Client(self._cluster)
            else:
                self.client = Client(self.scheduler, timeout=30)
        except (OSError, TimeoutError) as exc:
            self.close()
            raise BadInput(f"cannot reach the Dask scheduler {self.scheduler}: {exc}") from None

    def describe(self) -> str:
        n = len(self.client.scheduler_info().get("workers", {}))
        return f"Dask {'LocalCluster' if self.scheduler == 'local' else self.scheduler}, {n} workers"

    def run(self, spec, jobs):
        from depthcert.checkers.shards import run_chunk

        if not jobs:
            return
        spec_f = self.client.scatter(spec, broadcast=True)
        futures = [self.client.submit(run_chunk, spec_f, job, pure=False) for job in jobs]
        try:
            for fut in futures:
                try:
                    yield fut.result()
                except BadInput:
                    raise
                except Exception as exc:  # a worker lost or killed: one clear line, never a hang
                    raise BadInput(f"a Dask worker failed while checking points: {type(exc).__name__}: "
                                   f"{str(exc).splitlines()[0] if str(exc) else ''}") from None
        finally:
            for fut in futures:
                fut.cancel()

    def close(self) -> None:
        client = getattr(self, "client", None)
        if client is not None:
            client.close()
        if self._cluster is not None:
            self._cluster.close()
