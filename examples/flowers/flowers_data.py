"""The data side of the flowers example: images on disk, then Spark, then MDS shards.

* :func:`make_images` draws a small flowers-like image set (five classes, one sub-folder each)
  so the example needs no download. Each class has its own shape and colour, drawn at a random
  place and size on a noisy background, so a small CNN learns it in a few epochs.
* :func:`convert_with_spark` loads the folder with Spark's ``binaryFile`` source, takes each
  image's label from its folder name and its split from its file name, and writes the
  ``train`` and ``validation`` splits with :func:`shardstream.converters.dataframe_to_mds`,
  resizing every image in the UDF that runs on the executors.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from PIL import Image, ImageDraw
from tqdm import tqdm

from shardstream.converters import dataframe_to_mds

__all__ = [
    "CLASSES",
    "COLUMNS",
    "IMAGE_SIZE",
    "convert_with_spark",
    "log_progress",
    "make_images",
    "preprocess",
    "spark_session",
]

logger = logging.getLogger("flowers.data")

#: The five classes, in label order (their sorted folder names, as in tf_flowers).
CLASSES = ("daisy", "dandelion", "roses", "sunflowers", "tulips")
#: Side of the square images stored in the shards.
IMAGE_SIZE = 64
#: The shards' columns: the resized image as channels x height x width bytes, and its labels.
COLUMNS = {
    "id": "int64",
    "label": "int64",
    "class_name": "str",
    "image": f"ndarray:uint8:3,{IMAGE_SIZE},{IMAGE_SIZE}",
}
#: One image in ten goes to the validation split (by its number, so the split is stable).
VALIDATION_EVERY = 10

# Per class: the flower's colour, its centre's colour, and how it is drawn.
_LOOKS: dict[str, tuple[tuple[int, int, int], tuple[int, int, int], str]] = {
    "daisy": ((245, 245, 240), (240, 200, 40), "petals"),
    "dandelion": ((250, 215, 30), (250, 215, 30), "disc"),
    "roses": ((200, 25, 45), (120, 10, 25), "disc"),
    "sunflowers": ((250, 190, 20), (90, 50, 20), "petals"),
    "tulips": ((235, 90, 170), (235, 90, 170), "cup"),
}


def log_progress(level: int = logging.INFO) -> None:
    """Log the example's and shardstream's lines at ``level``; other libraries' warnings only."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for name in ("flowers", "shardstream"):
        logging.getLogger(name).setLevel(level)


def make_images(root: str | os.PathLike[str], images: int = 100, seed: int = 0) -> int:
    """Draw ``images`` JPEGs into ``root/<class>/<class>_<number>.jpg``; return how many.

    The classes take turns, so every class has ``images / 5`` images (give or take one).
    Numbers ending in 9 are validation images (see :data:`VALIDATION_EVERY`). Drawing is
    deterministic for a seed; an existing set of the same size is kept.
    """
    root = Path(root)
    stamp = root / f".made-{images}-{seed}"
    if stamp.exists():
        return images
    rng = np.random.default_rng(seed)
    for name in CLASSES:
        (root / name).mkdir(parents=True, exist_ok=True)
    # A bar for the larger sets (about 700 images a second here).
    for number in tqdm(range(images), desc="drawing images", disable=images < 2000):
        name = CLASSES[(number // VALIDATION_EVERY) % len(CLASSES)]
        _draw(name, rng).save(root / name / f"{name}_{number:05d}.jpg", quality=90)
    stamp.touch()
    return images


def _draw(name: str, rng: np.random.Generator) -> Image.Image:
    """One image of class ``name``: a noisy green-brown background and the flower on it."""
    width, height = (int(v) for v in rng.integers(80, 129, 2))
    background = rng.normal((70, 110, 50), 25, (height, width, 3))
    image = Image.fromarray(np.clip(background, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    colour, centre_colour, shape = _LOOKS[name]
    colour = _jitter(colour, rng)
    radius = float(rng.uniform(0.22, 0.4)) * min(width, height)
    cx = float(rng.uniform(radius, width - radius))
    cy = float(rng.uniform(radius, height - radius))
    if shape == "petals":
        for k in range(8):
            angle = 2 * math.pi * k / 8 + float(rng.uniform(0, 0.4))
            px, py = cx + 0.6 * radius * math.cos(angle), cy + 0.6 * radius * math.sin(angle)
            r = 0.4 * radius
            draw.ellipse((px - r, py - r, px + r, py + r), fill=colour)
        r = 0.35 * radius
        draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=_jitter(centre_colour, rng))
    elif shape == "disc":
        draw.ellipse((cx - radius, cy - radius, cx + radius, cy + radius), fill=colour)
        r = 0.3 * radius
        draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=_jitter(centre_colour, rng))
    else:  # a tulip's cup: a triangle on a half disc
        draw.pieslice((cx - radius, cy - radius, cx + radius, cy + radius), 0, 180, fill=colour)
        for k in (-1, 0, 1):
            tip = (cx + k * 0.6 * radius, cy - radius)
            draw.polygon([(cx - radius, cy), tip, (cx + radius, cy)], fill=colour)
    pixels = np.asarray(image, np.float32) + rng.normal(0, 12, (height, width, 3))
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def _jitter(colour: tuple[int, int, int], rng: np.random.Generator) -> tuple[int, int, int]:
    r, g, b = (int(np.clip(c + rng.integers(-25, 26), 0, 255)) for c in colour)
    return r, g, b


def preprocess(batch: Any, size: int = IMAGE_SIZE) -> Iterator[dict[str, Any]]:
    """The UDF of :func:`dataframe_to_mds`: each row's JPEG resized to ``size`` x ``size``.

    Runs on the executors, once per Arrow batch (a pandas DataFrame) of each partition, and
    yields one sample per row, the image as uint8 channels x height x width (normalising is
    left to the model, so the shards stay four times smaller than float32).
    """
    import io

    for row in batch.itertuples(index=False):
        with Image.open(io.BytesIO(row.content)) as image:
            resized = image.convert("RGB").resize((size, size), Image.Resampling.BILINEAR)
        pixels: NDArray[np.uint8] = np.asarray(resized, np.uint8).transpose(2, 0, 1)
        yield {
            "id": int(row.id),
            "label": int(row.label),
            "class_name": str(row.class_name),
            "image": np.ascontiguousarray(pixels),
        }


def spark_session(master: str = "local[2]", jvm_log: Path | None = None) -> Any:
    """The active SparkSession (a cluster's), or a local one bound to 127.0.0.1.

    ``jvm_log``: a file that takes the JVM's own output (its start-up lines, Spark's log4j
    lines, the Python workers' stderr) instead of this terminal; ``None`` leaves it here.
    """
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    # Python workers must run this interpreter (with shardstream, pyarrow and Pillow): so
    # dataframe_to_mds has it, and so have other jobs' (TorchDistributor's, in flowers_ddp.py).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    started = time.perf_counter()
    builder = (
        SparkSession.builder.master(master)
        .appName("shardstream-flowers")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
    )
    with _stderr_to(jvm_log):  # the JVM inherits the stream it starts with, and keeps it
        session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    logger.info("Spark %s started in %.1f s", session.version, time.perf_counter() - started)
    return session


@contextlib.contextmanager
def _stderr_to(path: Path | None) -> Iterator[None]:
    """File descriptor 2 appends to ``path`` inside the block, then is restored.

    The processes started in the block keep it: the JVM prints its start-up lines before any
    log setting of ours applies.
    """
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(path, "ab") as log:
            os.dup2(log.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def convert_with_spark(spark: Any, images: str, out: str) -> dict[str, int]:
    """Write ``images`` as the MDS splits ``out/train`` and ``out/validation``.

    Args:
        spark: A SparkSession.
        images: The image folder (``<class>/<file>.jpg``), as a path or URL Spark reads.
        out: Where the shards go: a local folder (a Unity Catalog volume under ``/Volumes``)
            or a URL (``s3://``, ``gs://``, ``azure://``, ``dbfs:/Volumes/...``).

    Returns:
        The number of samples written per split.
    """
    from pyspark.sql import functions as F

    # The UDF's module travels to the executors (on a cluster they do not have this folder).
    spark.sparkContext.addPyFile(__file__)
    files = (
        spark.read.format("binaryFile")
        .option("pathGlobFilter", "*.jpg")
        .option("recursiveFileLookup", "true")
        .load(str(images))
    )
    class_name = F.regexp_extract("path", r"/([^/]+)/[^/]+$", 1)
    number = F.regexp_extract("path", r"_(\d+)\.jpg$", 1).cast("long")
    labels = F.array(*(F.lit(name) for name in CLASSES))
    table = files.select(
        number.alias("id"),
        (F.array_position(labels, class_name) - 1).cast("long").alias("label"),
        class_name.alias("class_name"),
        "content",
    )
    written = {}
    for split, wanted in (("train", False), ("validation", True)):
        rows = table.where((F.col("id") % VALIDATION_EVERY == VALIDATION_EVERY - 1) == wanted)
        started = time.perf_counter()
        dataframe_to_mds(
            rows.repartition(2),
            mds_kwargs={
                "out": f"{out.rstrip('/')}/{split}",
                "columns": COLUMNS,
                "size_limit": "1mb",
                "exist_ok": True,
            },
            udf_iterable=preprocess,
            udf_kwargs={"size": IMAGE_SIZE},
            progress=False,
        )
        written[split] = int(rows.count())
        logger.info(
            "%s: %d images written in %.1f s", split, written[split], time.perf_counter() - started
        )
    return written
