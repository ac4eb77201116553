"""Keras ResNet-50 (or a small CNN on a CPU) trained with model.fit on
batches from heterodl data servers: the loader as a tf.data.Dataset,
checkpoints that restart fit at the exact next batch, and the data group
told to stop when training ends.

    heterodl serve --dataset data/sample --address 0.0.0.0:50051 &
    python examples/tensorflow/train_resnet.py --servers localhost:50051 \\
        --epochs 2 --checkpoint-dir checkpoints/

Several workers (MultiWorkerMirroredStrategy): give each its TF_CONFIG;
each worker's loader takes its share of every epoch (rank and world size
come from TF_CONFIG), and `--batch-size` is each worker's batch.
"""

import argparse
import json
import os

import keras
import tensorflow as tf

import heterodl
import heterodl.tf

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--servers", required=True, help="host:port[,host:port...]")
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--batch-size", type=int, default=64, help="per worker")
parser.add_argument("--image-size", type=int, default=224)
parser.add_argument("--model", choices=("resnet50", "small"), default=None,
                    help="default: resnet50 with a GPU, a small CNN without")
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--checkpoint-dir", default="", help="checkpoint every epoch, and "
                    "restart from the last one")
parser.add_argument("--save-every", type=int, default=0, help="also every this many batches")
parser.add_argument("--shutdown-servers", action="store_true",
                    help="tell the data servers to stop when training ends (worker 0)")
args = parser.parse_args()

if "TF_CONFIG" in os.environ:
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
elif tf.config.list_physical_devices("GPU"):
    strategy = tf.distribute.MirroredStrategy()
else:
    strategy = tf.distribute.get_strategy()
model_name = args.model or ("resnet50" if tf.config.list_physical_devices("GPU") else "small")

size = args.image_size
loader = heterodl.RemoteDataLoader(
    args.servers, batch_size=args.batch_size, epochs=args.epochs, seed=0,
    pipeline=f"random_resized_crop({size})|hflip(0.5)")
data = heterodl.tf.dataset(loader)
classes = len(loader.class_names)


def build_model():
    inputs = keras.Input((size, size, 3), dtype="uint8")
    x = keras.ops.cast(inputs, "float32")
    if model_name == "resnet50":
        x = keras.applications.resnet50.preprocess_input(x)
        x = keras.applications.ResNet50(weights=None, include_top=False, pooling="avg")(x)
    else:
        x = keras.layers.Rescaling(1 / 255)(x)
        for filters in (16, 32):
            x = keras.layers.Conv2D(filters, 3, strides=2, activation="relu")(x)
        x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(classes)(x)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer=keras.optimizers.SGD(args.lr, momentum=0.9),
                  # A slot no sample could fill is labelled -100.
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                                  ignore_class=-100),
                  metrics=["accuracy"])
    return model


with strategy.scope():
    model = build_model()


class Report(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        print(f"epoch {epoch + 1}/{args.epochs}: "
              + json.dumps({k: round(float(v), 4) for k, v in (logs or {}).items()}), flush=True)


callbacks = [Report()]
if args.checkpoint_dir:
    callbacks.insert(0, heterodl.tf.Checkpoint(
        data, args.checkpoint_dir, save_freq=args.save_every or "epoch"))
model.fit(data, epochs=args.epochs, callbacks=callbacks, verbose=0)
print(f"trained {model_name} on {loader.num_samples} samples of {classes} classes, "
      f"rank {loader.rank} of {loader.world_size}", flush=True)
if args.shutdown_servers and loader.rank == 0:
    loader.shutdown_servers()
