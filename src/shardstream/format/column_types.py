"""Whether a file's column is read as its dataset's column: the one rule, checked before reading.

A Parquet dataset's files are one table only if each column has one type in all of them, and a
Delta version's files hold each column in the type its schema says (or one the schema widened
it from). A file that breaks this would fail, or yield values of another type, at the first
batch that reads it, deep into an epoch; it is refused when the dataset is opened instead,
naming the file and the column.

The rule:

* **Same type.** A file's column is read as the dataset's column when the two types are the
  same up to how Arrow lays them out: ``string``, ``large_string`` and ``string_view`` are one
  type, so are ``binary``, ``large_binary`` and ``binary_view``, ``list`` and ``large_list``,
  a dictionary and its values, and the names writers give list items. This is all a Parquet
  dataset allows: no type is promoted (``int32`` in one file and ``int64`` in another is
  refused), since the rows of each file would come out in its own type.
* **Widened (Delta only).** A Delta version's rows are cast to its schema, so a file may also
  hold a type the schema widens (Delta's type widening): a narrower integer, a ``float`` or an
  integer for a ``double``, a decimal of no more digits either side of the point (or an
  integer) for a decimal, a date or a timestamp of any unit or zone for a timestamp; nested
  types field by field, a struct's fields by name (in any order, those a file lacks null:
  fields added later).

Pure: Arrow types in (``pyarrow``, imported lazily), a verdict out.
"""

from __future__ import annotations

from typing import Any

from shardstream._optional import require

__all__ = ["reads_as"]


def reads_as(held: Any, wanted: Any, *, widen: bool = False) -> bool:
    """Whether a file's column of type ``held`` is read as a column of type ``wanted``.

    Args:
        held: The column's ``pyarrow.DataType`` in the file.
        wanted: The dataset's type of the column.
        widen: Also accept a type ``wanted`` widens (a Delta schema: the rows are cast).

    Example:
        >>> import pyarrow as pa
        >>> reads_as(pa.large_string(), pa.string()), reads_as(pa.int32(), pa.int64())
        (True, False)
        >>> reads_as(pa.int32(), pa.int64(), widen=True)
        True
    """
    pa = require("pyarrow", extra="arrow", purpose="Reading Parquet")
    held, wanted = _plain(pa, held), _plain(pa, wanted)
    if held == wanted:
        return True
    t = pa.types
    if t.is_list(held) and t.is_list(wanted):
        return reads_as(held.value_type, wanted.value_type, widen=widen)
    if t.is_struct(held) and t.is_struct(wanted):
        names = [field.name for field in held]
        wanted_names = [field.name for field in wanted]
        if widen:  # cast by name: fields in any order, those the file lacks null
            fits = set(names) <= set(wanted_names) and len(set(names)) == len(names)
        else:
            fits = names == wanted_names
        return fits and all(
            reads_as(held.field(name).type, wanted.field(name).type, widen=widen) for name in names
        )
    if t.is_map(held) and t.is_map(wanted):
        return reads_as(held.key_type, wanted.key_type, widen=widen) and reads_as(
            held.item_type, wanted.item_type, widen=widen
        )
    return widen and _widens(pa, held, wanted)


def _plain(pa: Any, kind: Any) -> Any:
    """``kind`` with its layout choices undone (see the module's rule)."""
    t = pa.types
    if t.is_dictionary(kind):
        return _plain(pa, kind.value_type)
    if t.is_large_string(kind) or getattr(t, "is_string_view", lambda _: False)(kind):
        return pa.string()
    if t.is_large_binary(kind) or getattr(t, "is_binary_view", lambda _: False)(kind):
        return pa.binary()
    if t.is_large_list(kind):
        return pa.list_(kind.value_type)
    return kind


def _widens(pa: Any, held: Any, wanted: Any) -> bool:
    """Whether Delta's type widening reads ``held`` as ``wanted`` (both plain, not nested)."""
    t = pa.types
    integer = t.is_integer(held)
    if t.is_integer(wanted):
        return bool(integer and t.is_signed_integer(held) and held.bit_width <= wanted.bit_width)
    if t.is_float64(wanted):
        return bool(integer or t.is_float32(held) or t.is_float16(held))
    if t.is_decimal(wanted):
        if integer:
            return True
        return bool(
            t.is_decimal(held)
            and held.scale <= wanted.scale
            and held.precision - held.scale <= wanted.precision - wanted.scale
        )
    if t.is_timestamp(wanted):
        return bool(t.is_timestamp(held) or t.is_date(held))
    return False
