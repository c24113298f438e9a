"""An image folder with one sub-folder per class (``root/<class>/<image>``) to MDS."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Sequence
from typing import Any

from shardstream.converters.batches import DEFAULT_COMPRESSION
from shardstream.errors import ConfigurationError
from shardstream.storage import is_remote, local_path, open_store
from shardstream.writer.mds_writer import MDSWriter

__all__ = ["CLASSES_FILE", "IMAGE_ENCODINGS", "IMAGE_EXTENSIONS", "image_folder_to_mds"]

logger = logging.getLogger(__name__)

CLASSES_FILE = "classes.json"
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff")
#: How an image column may be stored (``image_encoding``).
IMAGE_ENCODINGS = ("bytes", "jpeg", "png", "pil")


def image_folder_to_mds(
    root: str | os.PathLike[str],
    out: Any,
    *,
    image_encoding: str = "bytes",
    extensions: Sequence[str] = IMAGE_EXTENSIONS,
    progress: bool = True,
    **writer_kwargs: Any,
) -> int:
    """Write ``root/<class>/<image>`` files as MDS samples with an integer label.

    Classes are the sub-folders of ``root`` in sorted order, labelled ``0, 1, ...`` (as
    torchvision's ``ImageFolder`` does); images are taken in sorted order within each class.
    Each sample has the columns ``image``, ``label`` (``int64``), ``class_name`` (``str``) and
    ``path`` (``str``, relative to ``root``). The class names in label order are also written
    to ``classes.json`` beside ``index.json``, as ``{"classes": [...]}``.

    Args:
        root: The folder of class folders.
        out: Where the dataset goes, as :class:`~shardstream.MDSWriter` takes it.
        image_encoding: How the ``image`` column is stored: ``"bytes"`` (the file as it is,
            the default), ``"jpeg"`` or ``"png"`` (the file as it is, which must be of that
            format; read back as a PIL image), or ``"pil"`` (decoded at write time to raw
            pixels).
        extensions: File name endings (case-insensitive) taken as images; others are skipped.
        progress: Show a progress bar of images.
        **writer_kwargs: More :class:`~shardstream.MDSWriter` arguments (``compression``
            defaults to ``"zstd"``).

    Returns:
        The number of samples written.

    Raises:
        ConfigurationError: ``root`` has no class folder or no image, or an unknown
            ``image_encoding``.

    Example:
        # /tmp/flowers/daisy/1.jpg, /tmp/flowers/roses/2.jpg, ...
        image_folder_to_mds("/tmp/flowers", "/tmp/my-ds", image_encoding="jpeg")
        sample = LocalDataset("/tmp/my-ds")[0]  # image, label, class_name, path
    """
    if image_encoding not in IMAGE_ENCODINGS:
        raise ConfigurationError(
            f"image_encoding must be one of {IMAGE_ENCODINGS}, got {image_encoding!r}"
        )
    top = os.fspath(root)
    if not os.path.isdir(top):
        raise ConfigurationError(
            f"{top} is not a folder: pass the root of a root/<class>/<image> folder tree"
        )
    classes = sorted(entry.name for entry in os.scandir(top) if entry.is_dir())
    if not classes:
        raise ConfigurationError(
            f"{top} has no class sub-folders: lay the images out as root/<class>/<image>"
        )
    endings = tuple(ending.lower() for ending in extensions)
    files = [
        (label, os.path.join(name, file))
        for label, name in enumerate(classes)
        for file in sorted(os.listdir(os.path.join(top, name)))
        if file.lower().endswith(endings) and os.path.isfile(os.path.join(top, name, file))
    ]
    if not files:
        raise ConfigurationError(
            f"{top} has no image files ending in {', '.join(endings)} in its class "
            "sub-folders: pass extensions= to take other endings"
        )
    decode = None
    if image_encoding == "pil":
        from shardstream._optional import require

        decode = require("PIL.Image", extra="images", purpose="Decoding images").open
    columns = {"image": image_encoding, "label": "int64", "class_name": "str", "path": "str"}
    writer_kwargs.setdefault("compression", DEFAULT_COMPRESSION)
    from tqdm.auto import tqdm

    with (
        MDSWriter(out=out, columns=columns, **writer_kwargs) as writer,
        tqdm(total=len(files), unit="image", desc="to MDS", disable=not progress) as bar,
    ):
        for label, relative in files:
            path = os.path.join(top, relative)
            image: Any
            if decode is not None:
                image = decode(path)
                image.load()
            else:
                with open(path, "rb") as handle:
                    image = handle.read()
            writer.write(
                {
                    "image": image,
                    "label": label,
                    "class_name": classes[label],
                    "path": relative.replace(os.sep, "/"),
                }
            )
            bar.update(1)
    _write_classes(out, classes)
    logger.info("wrote %d images of %d classes from %s", len(files), len(classes), top)
    return len(files)


def _write_classes(out: Any, classes: list[str]) -> None:
    """Write ``classes.json`` next to the index (locally and, for a URL, to the store)."""
    data = json.dumps({"classes": classes}).encode("utf-8")
    targets = list(out) if isinstance(out, tuple) else [out]
    for target in map(os.fspath, targets):
        if is_remote(target):
            with tempfile.TemporaryDirectory(prefix="shardstream-classes-") as scratch:
                path = os.path.join(scratch, CLASSES_FILE)
                with open(path, "wb") as handle:
                    handle.write(data)
                open_store(target).put_file(path, CLASSES_FILE)
        elif os.path.isdir(local_path(target)):  # a (local, remote) pair may drop its local copy
            with open(os.path.join(local_path(target), CLASSES_FILE), "wb") as handle:
                handle.write(data)
