"""Runs inside a virtualenv the heterodl wheel was installed into (by
wheel_test.py): one epoch across two ranks from real servers, checked for
exactly-once delivery, with the venv's own torch, NumPy or JAX. Standard
library plus what the venv has; never the build tree. Prints one JSON line.

    python wheel_check.py SERVERS NUM_SAMPLES EXPECT_FORMAT [jax]
"""

import hashlib
import json
import os
import sys

servers, num_samples, expect_format = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with_jax = sys.argv[4:] == ["jax"]

import heterodl  # noqa: E402

assert "site-packages" in heterodl.__file__, heterodl.__file__
assert os.environ.get("PYTHONPATH") is None

digest = hashlib.sha256()
seen = []
for rank in range(2):
    loader = heterodl.RemoteDataLoader(servers, batch_size=8, pipeline="random_resized_crop(32)",
                                       rank=rank, world_size=2, seed=3, pin_memory=False)
    assert loader.format == expect_format, loader.format
    assert len(loader.dataset) == num_samples
    loader.sampler.set_epoch(1)  # what a DDP loop or Lightning calls
    for images, labels in loader:
        assert tuple(images.shape[1:]) == (32, 32, 3), images.shape
        assert len(labels) == images.shape[0]
        digest.update(bytes(memoryview(images.numpy() if expect_format == "torch" else images)))
    for batch in loader:  # the same epoch again, as Batch objects
        indices = batch.indices
        if expect_format == "dlpack":  # no array library: the buffer protocol
            indices = memoryview(indices).tolist()
        seen.extend(int(i) for i in indices)
        assert batch.epoch == 1

result = {"python": sys.version.split()[0], "format": expect_format,
          "images_sha256": digest.hexdigest(), "indices": sorted(seen) == list(range(num_samples))}

if expect_format == "torch":
    import torch
    result["torch"] = torch.__version__
    loader = heterodl.RemoteDataLoader(servers, batch_size=8, pipeline="random_resized_crop(32)",
                                       rank=0, world_size=1, seed=3, pin_memory=False)
    full = [batch.images.clone() for batch in loader]
    assert full[0].dtype == torch.uint8 and isinstance(full[0], torch.Tensor)
    loader.resume(0, 2)
    resumed = next(iter(loader))
    result["resume"] = bool(torch.equal(resumed.images, full[2])) and resumed.index == 2
    # The raw arrays through DLPack by hand, as other torch-based code would.
    raw = heterodl.RemoteDataLoader(servers, batch_size=8, pipeline="random_resized_crop(32)",
                                    seed=3, format="dlpack")
    first = next(iter(raw))
    result["dlpack"] = bool(torch.equal(torch.from_dlpack(first.images), full[0]))
    result["sys_modules_numpy"] = "numpy" in sys.modules
elif expect_format == "dlpack":
    result["array"] = repr(heterodl.RemoteDataLoader(servers, batch_size=8, seed=3).dataset)
    result["modules"] = sorted(m for m in ("torch", "numpy", "jax") if m in sys.modules)
else:
    import numpy
    result["numpy"] = numpy.__version__
    result["torch_imported"] = "torch" in sys.modules
    raw = heterodl.RemoteDataLoader(servers, batch_size=8, pipeline="random_resized_crop(32)",
                                    seed=3, format="dlpack")
    first = next(iter(raw))
    as_numpy = heterodl.RemoteDataLoader(servers, batch_size=8,
                                         pipeline="random_resized_crop(32)", seed=3)
    second = next(iter(as_numpy))
    result["dlpack"] = bool((numpy.from_dlpack(first.images) == second.images).all())
    if with_jax:
        import jax
        import jax.numpy as jnp
        result["jax"] = jax.__version__
        result["jax_dlpack"] = bool(
            (jnp.asarray(jax.dlpack.from_dlpack(first.images)) == jnp.asarray(second.images))
            .all()) and bool((jax.dlpack.from_dlpack(first.labels) == second.labels).all())
    try:
        heterodl.RemoteDataLoader(servers, batch_size=8, pin_memory=True)
        result["pin_error"] = "none"
    except ValueError as error:
        result["pin_error"] = str(error)
print(json.dumps(result))
