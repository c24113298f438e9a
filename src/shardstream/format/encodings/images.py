"""Image encodings (``pil``, ``jpeg``, ``png``, their ``list[...]`` forms, ``jpeg_array``).

Pillow is imported on first use; without it these encodings raise an error naming the
``images`` extra. ``jpeg`` and ``png`` also accept bytes that already hold a JPEG or PNG file
(checked by their signature), stored as they are: re-encoding a JPEG would lose quality.
"""

from __future__ import annotations

import io
import struct
from functools import cache
from types import ModuleType
from typing import Any

from shardstream._optional import require
from shardstream.errors import (
    ImageSaveError,
    SampleEncodingError,
    SampleTypeError,
    SampleValueError,
)
from shardstream.format.encodings.base import Buffer, Encoding, no_argument, register_encoding

__all__ = [
    "ImageFileEncoding",
    "ImageListEncoding",
    "JPEGArrayEncoding",
    "PILEncoding",
]

_SIGNATURES = {"JPEG": b"\xff\xd8\xff", "PNG": b"\x89PNG\r\n\x1a\n"}


@cache
def _pil() -> ModuleType:
    return require("PIL.Image", extra="images", purpose="Image columns (pil, jpeg, png)")


def _is_image(value: Any) -> bool:
    return isinstance(value, _pil().Image)


class PILEncoding(Encoding):
    """``pil``: raw pixels: uint32 width, height and len(mode), the mode, then the pixel bytes."""

    def encode(self, value: Any) -> bytes:
        if not _is_image(value):
            raise self.reject(value, "a PIL.Image.Image")
        mode: bytes = value.mode.encode("utf-8")
        width, height = value.size
        pixels: bytes = value.tobytes()
        return struct.pack("<3I", width, height, len(mode)) + mode + pixels

    def decode(self, data: Buffer) -> Any:
        width, height, mode_size = struct.unpack_from("<3I", data, 0)
        mode = str(data[12 : 12 + mode_size], "utf-8")
        pixels = bytes(data[12 + mode_size :])
        # Pillow allocates the image before it finds the pixels short: check the size first
        # (every mode takes at least one bit per pixel; Pillow's sizes are C ints).
        if width * height > 8 * len(pixels) or max(width, height) >= 1 << 31:
            raise SampleEncodingError(
                f"encoding 'pil': a {width}x{height} image cannot fit in {len(pixels)} bytes"
            )
        return _pil().frombytes(mode, (width, height), pixels)


class ImageFileEncoding(Encoding):
    """``jpeg`` or ``png``: a PIL image stored as an image file of that format."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.format = "JPEG" if name == "jpeg" else "PNG"

    def encode(self, value: Any) -> bytes:
        signature = _SIGNATURES[self.format]
        if isinstance(value, (bytes, bytearray, memoryview)):
            data = bytes(value)
            if data.startswith(signature):
                return data
            raise SampleTypeError(
                f"encoding {self.name!r} got bytes that are not a {self.format} file "
                f"(they start {data[:8]!r}); pass a PIL image or the bytes of a {self.format} file"
            )
        if not _is_image(value):
            raise self.reject(value, f"a PIL.Image.Image or the bytes of a {self.format} file")
        if self.format == "JPEG" and getattr(value, "format", None) == "JPEG":
            original = _original_file(value)
            if original is not None:
                return original
        out = io.BytesIO()
        try:
            value.save(out, format=self.format)
        except (OSError, ValueError, KeyError) as exc:
            error = ImageSaveError if isinstance(exc, OSError) else SampleValueError
            raise error(
                f"encoding {self.name!r} could not save a {value.mode} image as {self.format}: "
                f"{exc}"
            ) from exc
        return out.getvalue()

    def decode(self, data: Buffer) -> Any:
        pil = _pil()
        try:
            return pil.open(io.BytesIO(bytes(data)))
        except (OSError, pil.DecompressionBombError) as exc:  # not an image file, or a bomb
            raise SampleEncodingError(f"encoding {self.name!r}: {exc}") from exc


def _original_file(image: Any) -> bytes | None:
    """Return the bytes of the JPEG file an image was opened from, when it still exists."""
    filename = getattr(image, "filename", None)
    if not filename:
        return None
    try:
        with open(filename, "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    return data if data.startswith(_SIGNATURES["JPEG"]) else None


class ImageListEncoding(Encoding):
    """``list[pil|jpeg|png]``: uint32 0, uint32 n, n uint32 sizes, then the payloads."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        inner = name[len("list[") : -1]
        self.inner: Encoding = PILEncoding(inner) if inner == "pil" else ImageFileEncoding(inner)

    def encode(self, value: Any) -> bytes:
        if not isinstance(value, (list, tuple)):
            raise self.reject(value, f"a list of values for {self.inner.name!r}")
        items = [self.inner.encode(item) for item in value]
        head = struct.pack(f"<{2 + len(items)}I", 0, len(items), *map(len, items))
        return head + b"".join(items)

    def decode(self, data: Buffer) -> list[Any]:
        (count,) = struct.unpack_from("<I", data, 4)
        sizes = struct.unpack_from(f"<{count}I", data, 8)
        return _split_decode(self.inner, data, 8 + 4 * count, sizes)


class JPEGArrayEncoding(Encoding):
    """``jpeg_array`` (alias ``jpegarray``): JPEG files given as bytes; decoded to PIL images.

    Layout: uint32 n, n uint32 sizes, then the files.
    """

    def encode(self, value: Any) -> bytes:
        if not isinstance(value, (list, tuple)) or not value:
            raise self.reject(value, "a non-empty list of JPEG file bytes")
        items = []
        for item in value:
            if not isinstance(item, (bytes, bytearray, memoryview)) or not bytes(item).startswith(
                _SIGNATURES["JPEG"]
            ):
                raise self.reject(item, "bytes of a JPEG file as each list item")
            items.append(bytes(item))
        return struct.pack(f"<{1 + len(items)}I", len(items), *map(len, items)) + b"".join(items)

    def decode(self, data: Buffer) -> list[Any]:
        (count,) = struct.unpack_from("<I", data, 0)
        sizes = struct.unpack_from(f"<{count}I", data, 4)
        return _split_decode(ImageFileEncoding("jpeg"), data, 4 + 4 * count, sizes)


def _split_decode(
    inner: Encoding, data: Buffer, position: int, sizes: tuple[int, ...]
) -> list[Any]:
    items = []
    view = memoryview(data)
    for size in sizes:
        items.append(inner.decode(view[position : position + size]))
        position += size
    if position != len(view):
        raise SampleEncodingError(
            f"list of images: sizes add up to {position} bytes but the value has {len(view)}"
        )
    return items


register_encoding("pil", no_argument(PILEncoding))
register_encoding("jpeg", no_argument(ImageFileEncoding))
register_encoding("png", no_argument(ImageFileEncoding))
for _inner in ("pil", "jpeg", "png"):
    register_encoding(f"list[{_inner}]", no_argument(ImageListEncoding))
register_encoding("jpeg_array", no_argument(JPEGArrayEncoding))
register_encoding("jpegarray", no_argument(JPEGArrayEncoding))
