"""The sample reader: the stages an epoch's pipeline is built from."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# A DataLoader worker starts afresh each epoch (forked from the loader's process): whatever it
# imports on first use, it imports again every epoch.
_WORKER_EPOCH = """
import sys
from shardstream import MDSWriter, StreamingDataLoader, StreamingDataset

root, report = sys.argv[1], sys.argv[2]
with MDSWriter(out=root, columns={"x": "int", "y": "bytes"}, size_limit=1 << 9) as out:
    for i in range(600):
        out.write({"x": i, "y": bytes(40)})


class Probe(StreamingDataset):
    def iter_batches(self):
        yield from super().iter_batches()
        with open(report, "w") as handle:  # from the worker, once its epoch is read
            handle.write(str("numpy.ma" in sys.modules))


dataset = Probe(local=root, batch_size=8, shuffle=True)
loader = StreamingDataLoader(dataset, batch_size=8, num_workers=1)
if "numpy.ma" in sys.modules:
    raise SystemExit("numpy.ma was imported before the epoch: nothing to test")
seen = sorted(int(x) for batch in loader for x in batch["x"])
assert seen == list(range(600)), seen
"""


def test_a_workers_epoch_does_not_import_numpy_ma(tmp_path: Path) -> None:
    # np.unique imports numpy.ma on its first call in a process (some 15-30 ms of CPU):
    # picking the stages or grouping a batch's shards must not pay it in each worker.
    report = tmp_path / "report"
    command = [sys.executable, "-c", _WORKER_EPOCH, str(tmp_path / "mds"), str(report)]
    subprocess.run(command, check=True, capture_output=True, text=True, timeout=120)
    assert report.read_text() == "False"
