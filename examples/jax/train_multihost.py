"""Data-parallel JAX across hosts on heterodl batches: each process loads its
rank's share of every epoch and the processes assemble global batches with
jax.make_array_from_process_local_data, sharded over a mesh of every
device; a jit-compiled step then trains a linear classifier on them.

    # on each of N hosts (or N processes on one machine):
    python examples/jax/train_multihost.py --servers data-0:50051 \\
        --coordinator host0:1234 --processes N --process-id I --batch-size 64

On a CPU, XLA_FLAGS=--xla_force_host_platform_device_count=K gives each
process K devices. --record FILE writes the dataset indices of every
global batch (from process 0), to check that each sample came once.
"""

import argparse
import json

import jax
import jax.numpy as jnp
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding, PartitionSpec

import heterodl

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--servers", required=True)
parser.add_argument("--coordinator", required=True, help="host:port of process 0")
parser.add_argument("--processes", type=int, required=True)
parser.add_argument("--process-id", type=int, required=True)
parser.add_argument("--batch-size", type=int, default=64, help="per process")
parser.add_argument("--image-size", type=int, default=32)
parser.add_argument("--epochs", type=int, default=1)
parser.add_argument("--lr", type=float, default=0.01)
parser.add_argument("--record", default="")
args = parser.parse_args()

jax.distributed.initialize(args.coordinator, num_processes=args.processes,
                           process_id=args.process_id)
# One axis over every device of every process: the batch is split along it.
mesh = jax.make_mesh((jax.device_count(),), ("data",))
batch_sharding = NamedSharding(mesh, PartitionSpec("data"))
replicated = NamedSharding(mesh, PartitionSpec())

# This process's share: its rank among the processes. Every process's
# local batch is the same size (drop_last: a global array needs it).
loader = heterodl.RemoteDataLoader(
    args.servers, batch_size=args.batch_size, rank=jax.process_index(),
    world_size=jax.process_count(), format="numpy", drop_last=True, seed=0,
    pipeline=f"random_resized_crop({args.image_size})|hflip(0.5)")
classes = len(loader.class_names)
features = args.image_size * args.image_size * 3
params = jax.device_put({"w": jnp.zeros((features, classes)), "b": jnp.zeros(classes)},
                        replicated)


@jax.jit
def train_step(params, images, labels):
    def loss_fn(params):
        x = images.reshape(images.shape[0], -1).astype(jnp.float32) / 255
        logits = x @ params["w"] + params["b"]
        valid = labels >= 0  # -100: a slot no sample could fill
        log_probs = jax.nn.log_softmax(logits)
        picked = jnp.take_along_axis(log_probs, jnp.maximum(labels, 0)[:, None], axis=1)[:, 0]
        return -jnp.sum(jnp.where(valid, picked, 0)) / jnp.maximum(valid.sum(), 1)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    return jax.tree_util.tree_map(lambda p, g: p - args.lr * g, params, grads), loss


records = []
for epoch in range(args.epochs):
    loader.set_epoch(epoch)
    for batch in loader:
        images = jax.make_array_from_process_local_data(batch_sharding, batch.images)
        labels = jax.make_array_from_process_local_data(batch_sharding, batch.labels)
        params, loss = train_step(params, images, labels)
        # Which samples the global batch held (every process's, in order).
        indices = jax.make_array_from_process_local_data(batch_sharding, batch.indices)
        gathered = multihost_utils.process_allgather(indices, tiled=True)
        records.append({"epoch": epoch, "step": batch.index, "loss": float(loss),
                        "global_batch": list(images.shape), "indices": gathered.tolist()})
    if jax.process_index() == 0:
        print(f"epoch {epoch + 1}/{args.epochs}: loss {records[-1]['loss']:.4f}, "
              f"global batch {records[-1]['global_batch']} over {jax.device_count()} devices "
              f"of {jax.process_count()} processes", flush=True)
if args.record and jax.process_index() == 0:
    with open(args.record, "w") as f:
        json.dump(records, f)
jax.distributed.shutdown()
