"""heterodl's RemoteDataLoader consumed from Python, as the feed peers are:
the same loop, uint8 batches as torch tensors.

    python feed_heterodl.py --server HOST:PORT --batch-size B --seconds S [--out F]
"""

import heterodl

import feed_common


def main():
    args = feed_common.arguments(
        __doc__, lambda parser: parser.add_argument("--server", required=True))
    loader = heterodl.RemoteDataLoader(servers=[args.server], batch_size=args.batch_size,
                                       pin_memory=False)

    def epochs(epoch):
        loader.set_epoch(epoch)
        return loader

    feed_common.report(feed_common.consume(epochs, args.seconds,
                                           lambda batch: int(batch.images.shape[0])), args.out,
                       ran=feed_common.versions("heterodl", "torch"))


if __name__ == "__main__":
    main()
