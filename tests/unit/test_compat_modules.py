"""The ``streaming`` alias against every module of the reference (mosaicml-streaming 0.13).

Each reference module either is one the alias provides (``compat.ALIASES``) or fails to
import with the migration guide's promise: a ``StreamingAliasError`` of one line that names
what to use instead, never Python's generic ``ModuleNotFoundError``. The list below is the
reference 0.13 wheel's modules (every ``streaming/**.py``), kept here as data so that the test
needs no reference install. Each check runs in a fresh interpreter: the alias is process-wide.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import shardstream
from shardstream.compat import ALIASES

SOURCE = Path(shardstream.__file__).parents[1]

#: Every module of mosaicml-streaming 0.13.0 (``streaming/**/*.py``, packages by their name).
REFERENCE_MODULES = [
    "streaming",
    "streaming._version",
    "streaming.base",
    "streaming.base.array",
    "streaming.base.batching",
    "streaming.base.batching.device_per_stream",
    "streaming.base.batching.per_stream",
    "streaming.base.batching.random",
    "streaming.base.batching.stratified",
    "streaming.base.compression",
    "streaming.base.constant",
    "streaming.base.converters",
    "streaming.base.converters.dataframe_to_mds",
    "streaming.base.dataloader",
    "streaming.base.dataset",
    "streaming.base.distributed",
    "streaming.base.format",
    "streaming.base.format.base",
    "streaming.base.format.base.reader",
    "streaming.base.format.base.writer",
    "streaming.base.format.index",
    "streaming.base.format.json",
    "streaming.base.format.json.encodings",
    "streaming.base.format.json.reader",
    "streaming.base.format.json.writer",
    "streaming.base.format.mds",
    "streaming.base.format.mds.encodings",
    "streaming.base.format.mds.reader",
    "streaming.base.format.mds.writer",
    "streaming.base.format.xsv",
    "streaming.base.format.xsv.encodings",
    "streaming.base.format.xsv.reader",
    "streaming.base.format.xsv.writer",
    "streaming.base.hashing",
    "streaming.base.local",
    "streaming.base.partition",
    "streaming.base.partition.orig",
    "streaming.base.partition.relaxed",
    "streaming.base.registry_utils",
    "streaming.base.sampling",
    "streaming.base.shared",
    "streaming.base.shared.array",
    "streaming.base.shared.barrier",
    "streaming.base.shared.memory",
    "streaming.base.shared.prefix",
    "streaming.base.shared.scalar",
    "streaming.base.shuffle",
    "streaming.base.shuffle.naive",
    "streaming.base.shuffle.py1br",
    "streaming.base.shuffle.py1e",
    "streaming.base.shuffle.py1s",
    "streaming.base.shuffle.py2s",
    "streaming.base.spanner",
    "streaming.base.storage",
    "streaming.base.storage.download",
    "streaming.base.storage.upload",
    "streaming.base.stream",
    "streaming.base.util",
    "streaming.base.world",
    "streaming.multimodal",
    "streaming.multimodal.convert",
    "streaming.multimodal.convert.laion",
    "streaming.multimodal.convert.laion.laion400m",
    "streaming.multimodal.convert.laion.laion400m.convert_and_upload",
    "streaming.multimodal.convert.webvid",
    "streaming.multimodal.convert.webvid.crawl_webvid",
    "streaming.multimodal.convert.webvid.crawl_webvid_subsets",
    "streaming.multimodal.convert.webvid.extract_webvid_videos",
    "streaming.multimodal.webvid",
    "streaming.text",
    "streaming.text.c4",
    "streaming.text.convert",
    "streaming.text.convert.c4",
    "streaming.text.convert.enwiki",
    "streaming.text.convert.enwiki.mds",
    "streaming.text.convert.enwiki.mds.create_pretraining_data",
    "streaming.text.convert.enwiki.mds.make_train_parallel",
    "streaming.text.convert.enwiki.mds.merge_shard_groups",
    "streaming.text.convert.enwiki.mds.pick_eval_samples",
    "streaming.text.convert.enwiki.mds.tokenization",
    "streaming.text.convert.enwiki.tfrecord",
    "streaming.text.convert.enwiki.tfrecord.count_samples",
    "streaming.text.convert.enwiki.tfrecord.create_pretraining_data",
    "streaming.text.convert.enwiki.tfrecord.make_train_parallel",
    "streaming.text.convert.enwiki.tfrecord.pick_eval_samples",
    "streaming.text.convert.enwiki.tfrecord.tokenization",
    "streaming.text.convert.enwiki_text",
    "streaming.text.convert.pile",
    "streaming.text.enwiki",
    "streaming.text.pile",
    "streaming.vision",
    "streaming.vision.ade20k",
    "streaming.vision.base",
    "streaming.vision.cifar10",
    "streaming.vision.coco",
    "streaming.vision.convert",
    "streaming.vision.convert.ade20k",
    "streaming.vision.convert.base",
    "streaming.vision.convert.cifar10",
    "streaming.vision.convert.coco",
    "streaming.vision.convert.fake_cifar10",
    "streaming.vision.convert.imagenet",
    "streaming.vision.imagenet",
]

# Each module imported both ways a user writes it, in a fresh interpreter with the alias.
_PROBE = textwrap.dedent("""
    import importlib, json, sys
    import shardstream
    shardstream.install_streaming_alias()
    results = {}
    for name in json.loads(sys.argv[1]):
        parent, _, leaf = name.rpartition(".")
        for how, load in (
            ("import", lambda: importlib.import_module(name)),
            ("from", lambda: exec(f"from {parent} import {leaf}") if parent else None),
        ):
            try:
                load()
                results[f"{how} {name}"] = ["ok", ""]
            except BaseException as exc:
                results[f"{how} {name}"] = [type(exc).__name__, str(exc)]
    print(json.dumps(results))
""")


def test_the_list_is_the_reference_0_13_module_list():
    assert len(REFERENCE_MODULES) == len(set(REFERENCE_MODULES)) == 103
    assert set(ALIASES) <= set(REFERENCE_MODULES)


def test_every_reference_module_imports_or_names_what_to_use_instead():
    env = {**os.environ, "PYTHONPATH": str(SOURCE)}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(REFERENCE_MODULES)],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    wrong = {}
    for name in REFERENCE_MODULES:
        for how in ("import", "from"):
            kind, message = results[f"{how} {name}"]
            parent, _, leaf = name.rpartition(".")
            # "from streaming.base.converters import dataframe_to_mds" names the function.
            provided = name in ALIASES or (
                how == "from" and (not parent or leaf in ALIASES.get(parent, {}))
            )
            if provided:
                ok = kind == "ok"
            else:
                # One line, naming the module (or the unprovided package that holds it: it is
                # imported first) and a specific replacement: never the generic list of what
                # the alias provides, nor Python's "No module named".
                refused = message.partition(" ")[0]
                ok = (
                    kind == "StreamingAliasError"
                    and "\n" not in message
                    and (name + ".").startswith(refused + ".")
                    and refused not in ALIASES
                    and " is not provided by shardstream" in message
                    and "it provides streaming" not in message
                )
            if not ok:
                wrong[f"{how} {name}"] = f"{kind}: {message}"
    assert not wrong, json.dumps(wrong, indent=1)
