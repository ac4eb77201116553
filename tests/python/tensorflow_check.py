"""Runs inside the TensorFlow venv the heterodl wheel was installed into (by
tensorflow_test.py), against real servers; prints one JSON line.

    python tensorflow_check.py import ORDER SERVERS
    python tensorflow_check.py spec SERVERS_BY_KIND_JSON
    python tensorflow_check.py fit SERVERS
    python tensorflow_check.py resume SERVERS DIR RECORDS STOP_AFTER
"""

import hashlib
import json
import os
import sys

mode = sys.argv[1]


def loader_for(servers, **options):
    import heterodl
    return heterodl.RemoteDataLoader(servers, **{"batch_size": 4, "seed": 5,
                                                 "pipeline": "random_resized_crop(32)",
                                                 **options})


def digest(values):
    """A checksum of arrays (tf or NumPy), nested as given."""
    import numpy
    hasher = hashlib.sha256()

    def add(value):
        if isinstance(value, dict):
            for key in sorted(value):
                hasher.update(key.encode())
                add(value[key])
        elif isinstance(value, (tuple, list)):
            for item in value:
                add(item)
        else:
            if hasattr(value, "to_list"):  # a RaggedTensor: its rows
                for row in value.to_list():
                    add(numpy.asarray(row))
                return
            array = numpy.asarray(value)
            hasher.update(str(array.dtype).encode() + str(array.shape).encode())
            hasher.update(numpy.ascontiguousarray(array).tobytes())
    add(values)
    return hasher.hexdigest()


def small_model(recorded=None):
    """A classifier over 32 x 32 crops; with `recorded`, each training step
    appends its batch's checksum (eagerly: run_eagerly)."""
    import keras
    import tensorflow as tf

    class Recording(keras.Model):
        def train_step(self, data):
            if recorded is not None:
                recorded.append(digest(data))
            return super().train_step(data)

    keras.utils.set_random_seed(1)  # the same initial weights in every run
    inputs = keras.Input((32, 32, 3), dtype="uint8")
    x = keras.layers.Rescaling(1 / 255)(keras.ops.cast(inputs, "float32"))
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(14)(x)
    model = Recording(inputs, outputs)
    model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                                  ignore_class=-100),
                  run_eagerly=recorded is not None)
    return model


if mode == "import":
    order, servers = sys.argv[2].split(","), sys.argv[3]
    samples = []
    for step in order:
        if step == "tensorflow":
            import tensorflow  # noqa: F401
        elif step == "keras":
            import keras  # noqa: F401
        elif step == "heterodl":
            import heterodl  # noqa: F401
        elif step == "heterodl.tf":
            import heterodl.tf  # noqa: F401
        elif step == "loader":
            samples.append(sum(len(batch) for batch in loader_for(servers, format="numpy")))
        elif step == "dataset":
            import heterodl.tf
            samples.append(sum(int(labels.shape[0]) for _, labels in
                               heterodl.tf.dataset(loader_for(servers))))
    print(json.dumps({"samples": samples}))

elif mode == "spec":
    import tensorflow as tf
    import heterodl
    import heterodl.tf
    result = {}
    for kind, (servers, options) in json.loads(sys.argv[2]).items():
        data = heterodl.tf.dataset(loader_for(servers, format="dlpack", **options))
        reference = loader_for(servers, format="numpy", **options)
        expected = []
        for batch in reference._batches():  # the same epoch as NumPy arrays
            element = data._heterodl_feed._element(batch)
            expected.append(digest(element))
        got = [digest(element) for element in data]
        result[kind] = {"spec": repr(data.element_spec), "batches": len(got),
                        "same": got == expected, "ragged": [
                            isinstance(t, tf.RaggedTensor)
                            for t in tf.nest.flatten(next(iter(data)), expand_composites=False)]}
    print(json.dumps(result))

elif mode == "fit":
    import heterodl.tf
    servers = sys.argv[2]
    loader = loader_for(servers)
    recorded = []
    small_model(recorded).fit(heterodl.tf.dataset(loader), epochs=3, verbose=0)
    # The same three epochs read as NumPy, in order.
    reference = loader_for(servers, format="numpy")
    expected = []
    for epoch in range(3):
        reference.set_epoch(epoch)
        expected.extend(digest((b.images, b.labels)) for b in reference)
    print(json.dumps({"steps": len(recorded), "same": recorded == expected,
                      "position": list(loader.position()), "batches": len(loader)}))

elif mode == "resume":
    import heterodl.tf
    import keras
    servers, directory, records, stop_after = sys.argv[2:6]
    stop_after = int(stop_after)
    data = heterodl.tf.dataset(loader_for(servers))
    recorded = []
    model = small_model(recorded)
    model.build((None, 32, 32, 3))

    class Die(keras.callbacks.Callback):
        """A preempted job: gone right after the checkpoint of this batch."""
        def __init__(self):
            super().__init__()
            self.steps = 0

        def on_train_batch_end(self, batch, logs=None):
            self.steps += 1
            if self.steps == stop_after:
                with open(records, "a") as f:
                    f.write("".join(r + "\n" for r in recorded))
                os._exit(0)

    callbacks = [heterodl.tf.Checkpoint(data, directory, save_freq=1)]
    if stop_after:
        callbacks.append(Die())
    model.fit(data, epochs=3, verbose=0, callbacks=callbacks)
    with open(records, "a") as f:
        f.write("".join(r + "\n" for r in recorded))
    import numpy
    print(json.dumps({"steps": len(recorded), "weights": numpy.concatenate(
        [w.numpy().ravel() for w in model.weights]).tolist()}))
