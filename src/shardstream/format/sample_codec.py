"""Per-schema generated functions that encode and decode one MDS sample.

Encoding and decoding are the per-sample hot paths of writers and readers. A function written
for one schema, with no loop and no per-column bookkeeping, runs faster than a generic one.
The generated text holds only indices and sizes: column names, encodings and decoders are
bound as values in the function's namespace, so nothing read from an (untrusted) index ever
becomes code.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from shardstream.errors import SampleEncodingError, ShardFormatError
from shardstream.format.encodings import Encoding

__all__ = [
    "DECODE_ERRORS",
    "SPLIT_READ_BYTES",
    "FileGetterFactory",
    "GetterFactory",
    "SampleEncoder",
    "compile_encoder",
    "compile_file_getter_factory",
    "compile_getter_factory",
]

#: ``make(buffer, view, offsets, source)`` returns ``get(k)`` decoding sample ``k``.
GetterFactory = Callable[[Any, memoryview, Sequence[int], str], Callable[[int], dict[str, Any]]]
#: ``make(file, offsets, source)`` returns ``(get, row)``: sample ``k`` as a dict, or as a
#: tuple of its values in column order, read with ``pread`` from ``file.fd``. The getters hold
#: ``file``, so a descriptor closed when ``file`` is collected outlives them.
FileGetterFactory = Callable[
    [Any, Sequence[int], str],
    tuple[Callable[[int], dict[str, Any]], Callable[[int], tuple[Any, ...]]],
]
#: ``encode(sample)`` returns the sample's byte parts and their total length.
SampleEncoder = Callable[[Mapping[str, Any]], tuple[list[bytes], int]]

Plan = Sequence[tuple[str, Encoding, "int | None"]]

#: What decoders raise on bytes that are not a value of their encoding (say, an ndarray shorter
#: than its header, or JSON nested too deep); readers report it as a corrupt sample.
DECODE_ERRORS = (
    ShardFormatError,
    SampleEncodingError,
    ValueError,
    struct.error,
    LookupError,
    OverflowError,
    RecursionError,
)


def _compile(lines: list[str], namespace: dict[str, Any], name: str) -> Any:
    exec("\n".join(lines), namespace)  # noqa: S102 - text built from integers only (see module doc)
    return namespace[name]


def compile_getter_factory(plan: Plan, *, zero_copy: bool = False) -> GetterFactory:
    """Build the factory of sample getters for columns ``plan`` (name, encoding, fixed size).

    With ``zero_copy``, ``bytes`` columns come back as read-only memoryviews of the buffer
    instead of ``bytes`` copies.

    ``get(k)`` decodes ``buffer[offsets[k]:offsets[k + 1]]`` and raises ``IndexError`` for a
    ``k`` out of range, or :class:`ShardFormatError` (naming ``source``) for bytes that do not
    hold a sample of these columns.
    """
    namespace, body, values = _decoding(plan, zero_copy=zero_copy, start="begin")
    lines = [
        "def make(buf, view, offsets, source):",
        "    def get(index):",
        "        begin = offsets[index]",
        "        end = offsets[index + 1]",
        "        try:",
        *body,
        "            return {" + ", ".join(f"n{k}: {v}" for k, v in enumerate(values)) + "}",
        "        except Errors as exc:",
        "            fail(source, index, exc)",
        "    return get",
    ]
    factory: GetterFactory = _compile(lines, namespace, "make")
    return factory


def compile_file_getter_factory(plan: Plan, *, zero_copy: bool = False) -> FileGetterFactory:
    """Build the factory of sample getters that read each sample from a file with ``pread``.

    For shards of large samples (images, long token arrays): nothing of the file is mapped, so
    a process's resident memory does not grow with the samples it has read. Each sample is one
    read of its whole span, decoded as :func:`compile_getter_factory`'s getters decode a
    buffer (for small samples, one read and a slice cost less than a read per column: system
    calls are the dear part). With ``zero_copy``, ``bytes`` columns are memoryviews of the
    sample's bytes.

    Without ``zero_copy``, a raw-bytes value of :data:`SPLIT_READ_BYTES` or more that is its
    sample's only variable-size column is read on its own instead, straight into the ``bytes``
    returned, and the rest of the sample with one or two more reads: for a ~100 KiB image,
    slicing it out of its sample's buffer is a second copy that costs more than those reads.

    ``get(k)`` and ``row(k)`` raise ``IndexError`` for ``k`` out of range and
    :class:`ShardFormatError` (naming ``source``) for bytes that do not hold a sample,
    including a read cut short (a file truncated under the reader).
    """
    namespace, body, values = _decoding(plan, zero_copy=zero_copy, start="0")
    namespace.update(pread=os.pread, Short=_ShortRead)
    split = None if zero_copy else _split_read(plan)
    whole = [
        "        try:",
        "            buf = pread(file.fd, end - begin, begin)",
        "            if len(buf) != end - begin:",
        "                raise Short(end - begin, len(buf))",
        *(["            view = memoryview(buf)"] if any("view[" in v for v in values) else []),
        *body,
    ]

    def getter(name: str, returned: Callable[[list[str]], str]) -> list[str]:
        lines = [
            f"    def {name}(index):",
            "        begin = offsets[index]",
            "        end = offsets[index + 1]",
        ]
        if split is not None:
            least, split_lines, split_values = split
            lines += [
                f"        if end - begin >= {least}:",
                "            try:",
                *split_lines,
                f"                return {returned(split_values)}",
                "            except Errors as exc:",
                "                fail(source, index, exc)",
            ]
        return [
            *lines,
            *whole,
            f"            return {returned(values)}",
            "        except Errors as exc:",
            "            fail(source, index, exc)",
        ]

    lines = [
        "def make(file, offsets, source):",
        *getter("get", lambda vs: "{" + ", ".join(f"n{k}: {v}" for k, v in enumerate(vs)) + "}"),
        *getter("row", lambda vs: "(" + "".join(f"{v}, " for v in vs) + ")"),
        "    return get, row",
    ]
    factory: FileGetterFactory = _compile(lines, namespace, "make")
    return factory


#: The least size of a raw-bytes value that :func:`compile_file_getter_factory`'s getters read
#: on its own, straight into the ``bytes`` they return: from about this size, slicing it out
#: of its whole sample (a second copy) costs more than the extra reads.
SPLIT_READ_BYTES = 32 * 1024


def _split_read(plan: Plan) -> tuple[int, list[str], list[str]] | None:
    """How the file getters read a large value apart from the rest of its sample, if they can.

    Only for columns whose one variable-size column is raw bytes: the value's place in the
    sample then follows from the sample's bounds and the fixed sizes, so one ``pread`` puts it
    in the ``bytes`` returned, with no second copy. The size header with the fixed columns
    before the value, and the fixed columns after it, are read on their own, and checked as
    the whole-sample read checks them. Returns the least sample size for which the value is
    :data:`SPLIT_READ_BYTES` or more, the lines that read and check (for a ``try`` block, with
    ``begin`` and ``end`` set) and each column's value; or ``None``.
    """
    variable = [k for k, (_name, _encoding, size) in enumerate(plan) if size is None]
    if len(variable) != 1 or not plan[variable[0]][1].raw_bytes:
        return None
    (j,) = variable
    fixed = [0 if size is None else int(size) for _name, _encoding, size in plan]
    before, after = 4 + sum(fixed[:j]), sum(fixed[j + 1 :])
    parts = ["head", "value", "tail"] if after else ["head", "value"]
    got = " + ".join(f"len({part})" for part in parts)
    lines = [
        f"                first = begin + {before}",
        f"                last = end - {after}",
        f"                head = pread(file.fd, {before}, begin)",
        "                value = pread(file.fd, last - first, first)",
        *([f"                tail = pread(file.fd, {after}, last)"] if after else []),
        f"                if {got} != end - begin:",
        f"                    raise Short(end - begin, {got})",
        "                size = unpack_sizes(head, 0)[0]",
        "                if size != last - first:",
        f"                    raise Mismatch(end - begin, size + {before + after})",
    ]
    values = []
    for k, (_name, encoding, _size) in enumerate(plan):
        if k == j:
            values.append("value")
            continue
        part, at = ("head", 4 + sum(fixed[:k])) if k < j else ("tail", sum(fixed[j + 1 : k]))
        if encoding.raw_bytes:
            values.append(f"{part}[{at}:{at + fixed[k]}]")
        elif encoding.struct_format is not None:
            values.append(f"u{k}({part}, {at})[0]")
        else:
            values.append(f"d{k}(memoryview({part})[{at}:{at + fixed[k]}])")
    return SPLIT_READ_BYTES + before + after, lines, values


def _decoding(
    plan: Plan, *, zero_copy: bool, start: str
) -> tuple[dict[str, Any], list[str], list[str]]:
    """The shared text of the getters: namespace, body lines, and each column's value.

    The body reads the sizes from ``buf`` at ``start`` (the sample's first byte there) and
    sets ``p0 .. pN``, the columns' bounds, checked against the sample's length
    (``end - begin``); the values are expressions over ``buf`` and ``view``.
    """
    variable = sum(size is None for _name, _encoding, size in plan)
    namespace: dict[str, Any] = {
        "unpack_sizes": struct.Struct(f"<{variable}I").unpack_from,
        "fail": _decode_failure,
        "Mismatch": _SizeMismatch,
        "Errors": DECODE_ERRORS,
    }
    body = []
    if variable:
        body.append(f"            sizes = unpack_sizes(buf, {start})")
    body.append(f"            p0 = {start} + {4 * variable}")
    values, seen = [], 0
    for k, (name, encoding, fixed) in enumerate(plan):
        namespace[f"n{k}"], namespace[f"d{k}"] = name, encoding.decoder
        if fixed is None:
            body.append(f"            p{k + 1} = p{k} + sizes[{seen}]")
            seen += 1
        else:
            body.append(f"            p{k + 1} = p{k} + {int(fixed)}")
        if encoding.raw_bytes:
            # Slicing bytes or an mmap copies once, straight to bytes; a memoryview never copies.
            values.append(f"{'view' if zero_copy else 'buf'}[p{k}:p{k + 1}]")
        elif encoding.struct_format is not None and fixed is not None:
            namespace[f"u{k}"] = struct.Struct(encoding.struct_format).unpack_from
            values.append(f"u{k}(buf, p{k})[0]")
        else:
            values.append(f"d{k}(view[p{k}:p{k + 1}])")
    last = len(plan)
    stop = "end" if start == "begin" else "end - begin"  # where the sample ends in ``buf``
    body += [
        f"            if p{last} != {stop}:",
        f"                raise Mismatch(end - begin, p{last} - {start})",
    ]
    return namespace, body, values


def compile_encoder(
    plan: Plan, fallback: Callable[[Mapping[str, Any]], list[bytes]]
) -> SampleEncoder:
    """Build ``encode(sample)`` for columns ``plan``.

    The generated function takes the fast path for well-typed values. On any failure it calls
    ``fallback`` (the generic encoder), which either encodes the sample or raises the precise
    error, naming the column; so both paths accept and refuse exactly the same values.
    """
    variable = sum(size is None for _name, _encoding, size in plan)
    namespace: dict[str, Any] = {
        "pack_sizes": struct.Struct(f"<{variable}I").pack,
        "fallback": fallback,
        "bytes_type": bytes,
    }
    lines = ["def encode(sample):", "    try:"]
    sizes, fixed_total = [], 4 + 4 * variable
    for k, (name, encoding, fixed) in enumerate(plan):
        namespace[f"n{k}"], namespace[f"e{k}"] = name, encoding.encode
        lines.append(f"        v{k} = sample[n{k}]")
        if encoding.raw_bytes:
            lines.append(f"        b{k} = v{k} if type(v{k}) is bytes_type else e{k}(v{k})")
        elif encoding.struct_format is not None and fixed is not None:
            namespace[f"s{k}"] = struct.Struct(encoding.struct_format).pack
            lines.append(f"        b{k} = s{k}(v{k})")
        else:
            lines.append(f"        b{k} = e{k}(v{k})")
        if fixed is None:
            sizes.append(f"len(b{k})")
        else:
            lines.append(f"        if len(b{k}) != {int(fixed)}:")
            lines.append("            return finish(fallback(sample))")
            fixed_total += int(fixed)
    payloads = ", ".join(f"b{k}" for k in range(len(plan)))
    lines += [
        f"        header = pack_sizes({', '.join(sizes)})",
        f"        return [header, {payloads}], {' + '.join([str(fixed_total), *sizes])}",
        "    except Exception:",
        "        return finish(fallback(sample))",
        "",
        "def finish(parts):",
        "    return parts, 4 + sum(map(len, parts))",
    ]
    encoder: SampleEncoder = _compile(lines, namespace, "encode")
    return encoder


class _SizeMismatch(ShardFormatError):
    def __str__(self) -> str:
        length, columns = self.args
        return f"sample is {length} bytes but its columns add up to {columns}"


class _ShortRead(ShardFormatError):
    def __str__(self) -> str:
        wanted, got = self.args
        return f"read {got} of {wanted} bytes: the file was cut short while open"


def _decode_failure(source: str, index: int, exc: Exception) -> None:
    raise ShardFormatError(
        f"{source}, sample {index}: cannot decode: {exc}; the shard is corrupt or does not "
        "match its index.json entry: delete it so it is fetched again, or rewrite the dataset"
    ) from exc
