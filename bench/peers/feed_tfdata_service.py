"""The tf.data service peer of `heterodl bench feed`, as the SageMaker
heterogeneous-cluster articles run it: a dispatcher and a worker (here one
process on loopback, as a data host would run them) build batches with the
standard ImageNet crop + flip; the consumer (this process) reads them over
the service and converts each batch to NumPy.

JPEGs are decoded only where the crop lies (decode_and_crop_jpeg), PNG, GIF
and BMP whole (decode_image) and then cropped. Files of other formats (WebP:
decode_image has no WebP) are left out before the run, and files a decoder
refuses are dropped (ignore_errors); both are counted in the report.

    python feed_tfdata_service.py --files LIST --workers N --batch-size B
                                  --seconds S [--out F]
"""

import multiprocessing
import os

import feed_common

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


# What tf.io.decode_and_crop_jpeg and tf.io.decode_image read.
READABLE = {"JPEG", "PNG", "GIF", "BMP"}


def pipeline(paths, labels, workers, batch_size):
    import tensorflow as tf

    def crop_window(shape):
        # The standard ImageNet crop: a random area 8-100%, aspect 3/4-4/3.
        begin, size, _ = tf.image.sample_distorted_bounding_box(
            shape, bounding_boxes=tf.zeros([1, 0, 4]), min_object_covered=0.1,
            aspect_ratio_range=(3 / 4, 4 / 3), area_range=(0.08, 1.0), max_attempts=10,
            use_image_if_no_bounding_boxes=True)
        return begin, size

    def jpeg(data):
        # Decoded only where the crop lies.
        begin, size = crop_window(tf.image.extract_jpeg_shape(data))
        window = tf.stack([begin[0], begin[1], size[0], size[1]])
        return tf.image.decode_and_crop_jpeg(data, window, channels=3)

    def other(data):
        image = tf.io.decode_image(data, channels=3, expand_animations=False)
        begin, size = crop_window(tf.shape(image))
        return tf.slice(image, begin, size)

    def load(path, label):
        data = tf.io.read_file(path)
        image = tf.cond(tf.io.is_jpeg(data), lambda: jpeg(data), lambda: other(data))
        image = tf.image.resize(image, [224, 224])
        image = tf.image.random_flip_left_right(image)
        return tf.cast(image, tf.uint8), label

    options = tf.data.Options()
    options.threading.private_threadpool_size = workers
    dataset = tf.data.Dataset.from_tensor_slices((paths, labels)).shuffle(len(paths))
    dataset = dataset.map(load, num_parallel_calls=workers)
    dataset = dataset.apply(tf.data.experimental.ignore_errors())  # refused files
    return dataset.batch(batch_size).prefetch(2).with_options(options)


def serve(port_queue):
    import tensorflow as tf
    dispatcher = tf.data.experimental.service.DispatchServer(
        tf.data.experimental.service.DispatcherConfig(port=0))
    address = dispatcher.target.split("://")[1]
    worker = tf.data.experimental.service.WorkerServer(  # noqa: F841 (kept alive)
        tf.data.experimental.service.WorkerConfig(dispatcher_address=address))
    port_queue.put(dispatcher.target)
    dispatcher.join()


def main():
    args = feed_common.arguments(__doc__)
    paths, labels = feed_common.read_file_list(args.files)
    paths, labels, left_out, note = feed_common.keep_formats(paths, labels, READABLE, "tf.io")
    context = multiprocessing.get_context("spawn")
    targets = context.Queue()
    server = context.Process(target=serve, args=(targets,), daemon=True)
    server.start()
    target = targets.get(timeout=120)
    import tensorflow as tf
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(1)

    def epochs(epoch):
        dataset = pipeline(paths, labels, args.workers, args.batch_size)
        return dataset.apply(tf.data.experimental.service.distribute(
            processing_mode="parallel_epochs", service=target, job_name=f"epoch-{epoch}"))

    def touch(batch):
        images, _ = batch
        return int(images.numpy().shape[0])

    result = feed_common.consume(epochs, args.seconds, touch, files_per_epoch=len(paths))
    server.terminate()
    feed_common.report(result, args.out, left_out, note,
                       ran=feed_common.versions("tensorflow"))


if __name__ == "__main__":
    main()
