"""The Unischema a Petastorm dataset stores, read without running any code it could carry.

Petastorm's ``materialize_dataset`` pickles the dataset's ``Unischema`` and writes it into the
key-value metadata of the Parquet file ``_common_metadata``, under the key
``dataset-toolkit.unischema.v1``. That file is usually at the dataset's root; recent Petastorm
writes it beside the first data file instead (in its partition folder), so both are looked at.

A pickle can make the reader call any function it names: a ``_common_metadata`` written by
someone else could run code on every machine that reads the dataset. So the pickle is loaded by
an unpickler whose ``find_class`` knows a fixed list of names (Petastorm's schema and codec
classes, also under their old package names, ``pyspark.sql.types``' types, NumPy's scalar
types and ``dtype``, ``Decimal``, ``OrderedDict``, a few builtin types) and maps each to a
stand-in of its own (:mod:`shardstream.loader.petastorm.unischema`,
:mod:`shardstream.loader.petastorm.codecs`), whose constructors only store values. Any other
name is refused with :class:`~shardstream.errors.UnsafePickleError`, before anything is called.

Petastorm 0.4-0.7 made ``UnischemaField`` a plain namedtuple, and importing pyspark patched
every namedtuple to pickle as ``pyspark.serializers._restore(name, fields, values)``, a call
that builds a namedtuple class of any name. That name maps to :func:`_restore`, which builds a
``UnischemaField`` and nothing else.
"""

from __future__ import annotations

import collections
import copyreg
import io
import logging
import pickle
from decimal import Decimal
from typing import Any

import numpy as np

from shardstream.errors import (
    ConfigurationError,
    ObjectNotFoundError,
    ShardFormatError,
    UnsafePickleError,
)
from shardstream.loader.petastorm import codecs
from shardstream.loader.petastorm.unischema import Unischema, UnischemaField
from shardstream.storage import ObjectStore, fetch_bytes
from shardstream.tables.footers import key_value_metadata

__all__ = [
    "COMMON_METADATA",
    "ROW_GROUPS_PER_FILE_KEY",
    "UNISCHEMA_KEY",
    "dump_unischema",
    "load_unischema",
    "read_unischema",
]

logger = logging.getLogger(__name__)

#: The key of the pickled Unischema in ``_common_metadata``'s key-value metadata.
UNISCHEMA_KEY = b"dataset-toolkit.unischema.v1"
#: The key of the row-group count of each file (JSON), which Petastorm's own reader needs.
ROW_GROUPS_PER_FILE_KEY = b"dataset-toolkit.num_row_groups_per_file.v1"
#: The metadata file Petastorm writes.
COMMON_METADATA = "_common_metadata"

_PETASTORM: dict[str, dict[str, type]] = {
    "petastorm.unischema": {"Unischema": Unischema, "UnischemaField": UnischemaField},
    "petastorm.codecs": {
        "ScalarCodec": codecs.ScalarCodec,
        "NdarrayCodec": codecs.NdarrayCodec,
        "CompressedNdarrayCodec": codecs.CompressedNdarrayCodec,
        "CompressedImageCodec": codecs.CompressedImageCodec,
    },
}
# Petastorm's package before it was named so; its own loader maps these names the same way.
_OLD_PACKAGES = ("av.experimental.deepdrive.dataset_toolkit", "av.ml.dataset_toolkit")
_NUMPY_TYPES: dict[str, type] = {
    name: getattr(np, name)
    for name in (
        "bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
        "float16", "float32", "float64", "longdouble", "complex64", "complex128", "str_",
        "bytes_", "object_", "datetime64", "timedelta64", "intc", "uintc", "int_", "uint",
        "longlong", "ulonglong", "short", "ushort", "byte", "ubyte", "single", "double",
    )
}  # fmt: skip
# NumPy 1 names that NumPy 2 dropped, for pickles written under NumPy 1.
_NUMPY_TYPES.update(
    string_=np.bytes_, unicode_=np.str_, bool8=np.bool_, float_=np.float64, complex_=np.complex128
)
_NUMPY_TYPES["bool"] = np.bool_  # NumPy 2 pickles np.bool_ by this name
_BUILTINS: dict[str, type] = {
    kind.__name__: kind
    for kind in (
        str,
        bytes,
        bytearray,
        int,
        float,
        complex,
        bool,
        object,
        tuple,
        list,
        dict,
        set,
        frozenset,
    )
}


def allowed_global(module: str, name: str) -> Any:
    """The stand-in for the global ``module.name`` of a Unischema pickle.

    Raises:
        UnsafePickleError: Not one of the names a Petastorm schema is made of.
    """
    for old in _OLD_PACKAGES:
        if module.startswith(old + "."):
            module = "petastorm" + module[len(old) :]
    found: Any = _PETASTORM.get(module, {}).get(name)
    if found is None:
        if module == "pyspark.sql.types" and name in codecs.SPARK_TYPE_NAMES:
            found = codecs.spark_type_class(name)
        elif module == "numpy":
            found = np.dtype if name == "dtype" else _NUMPY_TYPES.get(name)
        elif (module, name) == ("collections", "OrderedDict"):
            found = collections.OrderedDict
        elif (module, name) == ("decimal", "Decimal"):
            found = Decimal
        elif module in ("builtins", "__builtin__"):
            found = _BUILTINS.get(name)
        elif (module, name) in (("copyreg", "_reconstructor"), ("copy_reg", "_reconstructor")):
            found = _reconstructor
        elif (module, name) == ("pyspark.serializers", "_restore"):
            found = _restore
    if found is None:
        raise UnsafePickleError(
            f"the dataset's Unischema metadata names {module}.{name}, which shardstream does "
            f"not load: unpickling it could run code. Only Petastorm's own schema and codec "
            f"classes (ScalarCodec, NdarrayCodec, CompressedNdarrayCodec, CompressedImageCodec), "
            f"pyspark types and NumPy types are read; a dataset written with other classes (a "
            f"codec of your own) needs its columns decoded by you: read them as stored with "
            f"make_batch_reader after removing {COMMON_METADATA} from a copy of the dataset"
        )
    return found


class _SchemaUnpickler(pickle.Unpickler):
    """``pickle``'s unpickler with :func:`allowed_global` as its only source of globals."""

    def find_class(self, module: str, name: str) -> Any:
        return allowed_global(module, name)


def _reconstructor(cls: Any, base: Any, state: Any) -> Any:
    """``copyreg._reconstructor`` (protocol 0 and 1 pickles) for the stand-in classes alone."""
    stand_ins = [kind for names in _PETASTORM.values() for kind in names.values()]
    if cls not in stand_ins and not (isinstance(cls, type) and issubclass(cls, codecs.SparkType)):
        raise UnsafePickleError(f"the Unischema metadata rebuilds {cls!r}, which is not loaded")
    if base is object:
        return cls.__new__(cls)
    if base is tuple and cls is UnischemaField:
        return UnischemaField(*state)
    raise UnsafePickleError(f"the Unischema metadata rebuilds {cls!r} from {base!r}")


def _restore(name: Any, fields: Any, values: Any) -> UnischemaField:
    """``pyspark.serializers._restore`` (Petastorm 0.4-0.7's fields) for a UnischemaField alone.

    Raises:
        UnsafePickleError: It rebuilds another namedtuple, or fields a UnischemaField lacks.
    """
    names = tuple(fields) if isinstance(fields, (tuple, list)) else ()
    if name != "UnischemaField" or not all(isinstance(n, str) for n in names):
        raise UnsafePickleError(
            f"the Unischema metadata rebuilds a namedtuple {name!r} with pyspark's _restore; "
            f"only Petastorm's UnischemaField is loaded"
        )
    unknown = [n for n in names if n not in UnischemaField._fields]
    required = ("name", "numpy_dtype", "shape")
    if unknown or not set(required) <= set(names) or not isinstance(values, tuple):
        raise UnsafePickleError(
            f"the Unischema metadata rebuilds a UnischemaField with the fields {names!r}; "
            f"Petastorm's are {UnischemaField._fields!r}"
        )
    return UnischemaField(**dict(zip(names, values, strict=True)))


def load_unischema(data: bytes, *, source: str) -> Unischema:
    """The Unischema pickled in ``data``, loaded into stand-ins.

    Raises:
        UnsafePickleError: The pickle names a class that is not a Petastorm schema's.
        ShardFormatError: It does not unpickle, or is not a Unischema.
    """
    try:
        schema = _SchemaUnpickler(io.BytesIO(data)).load()
    except UnsafePickleError as exc:
        raise UnsafePickleError(f"{source}: {exc}") from None
    except ShardFormatError as exc:
        raise ShardFormatError(f"{source}: {exc}") from None
    except Exception as exc:  # a malformed pickle fails in any of many ways
        raise ShardFormatError(
            f"{source}: the Unischema under {UNISCHEMA_KEY.decode()} does not unpickle ({exc}); "
            f"write the dataset's metadata again with Petastorm's materialize_dataset"
        ) from exc
    if not isinstance(schema, Unischema):
        raise ShardFormatError(
            f"{source}: {UNISCHEMA_KEY.decode()} holds a {type(schema).__name__}, not a Unischema"
        )
    return schema


def read_unischema(store: ObjectStore, first_file: str | None) -> Unischema | None:
    """The Unischema stored with the dataset at ``store``, or ``None`` when there is none.

    Args:
        store: The dataset's root.
        first_file: The key of its first data file, in whose folder recent Petastorm writes
            ``_common_metadata``.

    Raises:
        UnsafePickleError: The stored pickle names a class that is not loaded.
        ShardFormatError: ``_common_metadata`` is not Parquet, or its Unischema is malformed.
    """
    keys = [COMMON_METADATA]
    if first_file is not None and "/" in first_file:
        keys.append(first_file.rsplit("/", 1)[0] + "/" + COMMON_METADATA)
    for key in keys:
        try:
            data = fetch_bytes(store, key)
        except (ObjectNotFoundError, FileNotFoundError):
            continue
        pickled = key_value_metadata(data, source=store.url(key)).get(UNISCHEMA_KEY)
        if pickled is not None:
            logger.info("read the Unischema of %s", store.url(key))
            return load_unischema(pickled, source=store.url(key))
    return None


# Each stand-in class pickles under the name Petastorm's own class has; np.bool_ under the name
# NumPy 1 and 2 both know (NumPy 2 would write numpy.bool, which NumPy 1 lacks).
_PETASTORM_NAMES: dict[type, tuple[str, str]] = {
    kind: (module, name) for module, names in _PETASTORM.items() for name, kind in names.items()
}
_PETASTORM_NAMES[np.bool_] = ("numpy", "bool_")
_PurePickler: Any = pickle._Pickler  # the pure-Python pickler, whose save() can be extended


class _PetastormPickler(_PurePickler):  # type: ignore[misc]
    """Pickles shardstream's stand-ins under Petastorm's and pyspark's names."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, codecs.SparkType):  # a type loaded from a schema: the real type's
            return copyreg.__newobj__, (type(obj),), dict(obj.state) or None  # type: ignore[attr-defined]
        return NotImplemented

    def save(self, obj: Any, save_persistent_id: bool = True) -> None:
        target = None
        if isinstance(obj, type):
            target = _PETASTORM_NAMES.get(obj)
            if target is None and issubclass(obj, codecs.SparkType):
                target = ("pyspark.sql.types", obj.type_name)
        if target is None:
            super().save(obj, save_persistent_id)
        elif id(obj) in self.memo:
            self.write(self.get(self.memo[id(obj)][0]))
        else:
            module, name = target
            if self.proto >= 4:
                self.save(module)
                self.save(name)
                self.write(pickle.STACK_GLOBAL)
            else:
                self.write(pickle.GLOBAL + f"{module}\n{name}\n".encode("ascii"))
            self.memoize(obj)


def dump_unischema(schema: Unischema, protocol: int = 4) -> bytes:
    """``schema`` pickled as Petastorm's ``materialize_dataset`` pickles it.

    Its classes are named as Petastorm's own (``petastorm.unischema.Unischema``,
    ``petastorm.codecs.NdarrayCodec``...), so Petastorm reads it, and so does
    :func:`load_unischema`.

    Raises:
        ConfigurationError: ``schema`` is not a :class:`Unischema`.
    """
    if not isinstance(schema, Unischema):
        raise ConfigurationError(
            f"the schema must be a shardstream.loader.petastorm.Unischema, got "
            f"{type(schema).__name__}"
        )
    memfile = io.BytesIO()
    _PetastormPickler(memfile, protocol=protocol).dump(schema)
    return memfile.getvalue()
