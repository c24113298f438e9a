"""Flowers with TensorFlow: a Keras CNN trained from the same shards through ``tf.data``.

The ``tf.data.Dataset`` is shardstream's (the one behind ``make_spark_converter(...)
.make_tf_dataset()``): a StreamingDataset's samples, typed from the index it loaded
(``image`` is ``uint8[3, 64, 64]``, ``label`` ``int64``), batched and prefetched::

    python examples/flowers/flowers_keras.py --remote demo-data/flowers/Volumes/main/default/flowers
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow loads: no banner
import tensorflow as tf  # after the variable above
from flowers_data import CLASSES, log_progress

from shardstream import StreamingDataset
from shardstream.loader.tf_dataset import tf_dataset


def flowers(remote: str, cache: str, split: str, batch_size: int, **kwargs: Any) -> Any:
    """The split as a ``tf.data.Dataset`` of ``(image, label)`` batches; images NHWC floats."""
    streaming = StreamingDataset(remote=remote, local=cache, split=split,
                                 batch_size=batch_size, **kwargs)  # fmt: skip
    # Training: for ever, reshuffled each epoch (Keras counts the steps); validation: one pass.
    epochs = None if kwargs.get("shuffle") else 1
    batches = tf_dataset(streaming, batch_size, epochs, tail=None, prefetch=None)
    return batches.map(
        lambda b: (tf.transpose(tf.cast(b.image, tf.float32) / 127.5 - 1, [0, 2, 3, 1]),
                   b.label)
    )  # fmt: skip


def model(size: int = 64, width: int = 16) -> Any:
    """A small MobileNet-style Keras model: separable convolutions and global pooling."""
    layers = tf.keras.layers
    return tf.keras.Sequential(
        [
            tf.keras.Input((size, size, 3)),
            layers.Conv2D(width, 3, strides=2, padding="same", use_bias=False),
            layers.BatchNormalization(momentum=0.9),
            layers.ReLU(6.0),
            *(
                block
                for channels in (2 * width, 4 * width, 4 * width)
                for block in (
                    layers.SeparableConv2D(channels, 3, strides=2, padding="same", use_bias=False),
                    layers.BatchNormalization(momentum=0.9),
                    layers.ReLU(6.0),
                )
            ),
            layers.GlobalAveragePooling2D(),
            layers.Dense(len(CLASSES)),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--remote", required=True, help="the shards (train/ and validation/)")
    parser.add_argument("--cache", default="demo-data/flowers/keras-cache")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--report", default="", help="write the figures as JSON here")
    args = parser.parse_args()
    log_progress()
    tf.random.set_seed(17)

    train = flowers(args.remote, args.cache, "train", args.batch_size, shuffle=True)
    # Validation one sample at a time: no batch is topped up with repeats, each sample counts once.
    validation = flowers(args.remote, args.cache, "validation", 1)
    train_samples, validation_samples = (
        len(StreamingDataset(remote=args.remote, local=args.cache, split=split, batch_size=1))
        for split in ("train", "validation")
    )
    steps = math.ceil(train_samples / args.batch_size)
    net = model()
    net.compile(
        optimizer=tf.keras.optimizers.AdamW(0.01),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    started = time.perf_counter()
    history = net.fit(train, epochs=args.epochs, steps_per_epoch=steps, shuffle=False,
                      validation_data=validation, validation_steps=validation_samples,
                      verbose=2)  # fmt: skip
    seconds = time.perf_counter() - started
    accuracy = history.history["val_accuracy"]
    print(f"keras:     {args.epochs} epochs of {steps * args.batch_size} samples in "
          f"{seconds:.1f} s; validation accuracy {100 * accuracy[-1]:.1f}% "
          f"(chance: {100 / len(CLASSES):.0f}%)")  # fmt: skip
    if args.report:
        figures = {name: history.history[name] for name in ("loss", "accuracy", "val_accuracy")}
        Path(args.report).write_text(json.dumps(figures))


if __name__ == "__main__":
    main()
