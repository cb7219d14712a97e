"""An aotc library served by Ray Serve: the deployment behind `serve run`, for users who
outgrow one process or one machine.

Each replica holds `instances` aotc instances of the library, each using `threads`
threads per call (replicas x instances x threads = the cores the deployment takes).
Requests are single inputs (one row of a program whose batch dimension is dynamic);
`serve.batch` groups the ones that arrive together into one call, so a replica answers
many requests with one pass of the model. A new library version is rolled out through
`user_config` ({"library": path}): every replica loads the new file beside the old one,
then swaps, so calls already running finish on the old instances and no request fails.

    from ray import serve
    from serve_model import app
    handle = serve.run(app("model.so", replicas=2))
    y = handle.remote(x_row).result()
    # a new version, rolled out while requests keep coming:
    serve.run(app("model.so", replicas=2, version_library="model_v2.so"))
"""
import asyncio
import queue

import numpy as np
from ray import serve

import aotc


class Instances:
    """A fixed set of aotc instances of one library; a call takes one, runs, returns it."""

    def __init__(self, library, instances, threads):
        self.library = library
        self.free = queue.Queue()
        for _ in range(instances):
            self.free.put(aotc.load(library, threads=threads))

    def run(self, x):
        m = self.free.get()
        try:
            return m(x)
        finally:
            self.free.put(m)


@serve.deployment
class AotcModel:
    def __init__(self, library, instances=1, threads=1):
        self.instances, self.threads = instances, threads
        self.current = Instances(library, instances, threads)

    def reconfigure(self, config):
        """A rolling upgrade: load the new version first, then swap (calls that hold the old
        set finish on it; it is freed with its last reference)."""
        library = config.get("library")
        if library and library != self.current.library:
            self.current = Instances(library, self.instances, self.threads)

    @serve.batch(max_batch_size=64, batch_wait_timeout_s=0.002)
    async def __call__(self, rows):
        served = self.current
        batch = np.stack(rows)
        out = await asyncio.get_running_loop().run_in_executor(None, served.run, batch)
        out = out[0] if isinstance(out, tuple) else out
        return [(served.library, out[i]) for i in range(len(rows))]


def app(library, replicas=1, instances=1, threads=1, version_library=None):
    """The deployment for `library` (or, for a rolling upgrade, `version_library`)."""
    return AotcModel.options(
        num_replicas=replicas,
        ray_actor_options={"num_cpus": 0},
        user_config={"library": version_library or library},
        max_ongoing_requests=256,
    ).bind(library, instances, threads)
