"""Saves and loads state dicts with mosaicml-streaming 0.13, in its own venv.

For each case of the job file: the reference's loader's ``state_dict`` after some batches
(``save``), or the
batches it reads after loading a state dict (``resume``), through torch's DataLoader in this
process. Writes the answers as JSON.

Usage: python ref_resume.py JOB.json OUT.json
"""

from __future__ import annotations

import json
import sys
import warnings
from typing import Any


def _dataset(case: dict[str, Any]) -> Any:
    from streaming import StreamingDataset

    return StreamingDataset(
        local=case["folder"], batch_size=case["batch"], shuffle=case["shuffle"],
        num_canonical_nodes=case["ncn"],
    )  # fmt: skip


def _answer(case: dict[str, Any]) -> Any:
    from streaming import StreamingDataLoader
    from torch.utils.data import DataLoader

    dataset = _dataset(case)
    if case["mode"] == "save":  # the state its loader gives after reading some batches
        loader = StreamingDataLoader(dataset, batch_size=case["batch"], num_workers=0)
        for _, _ in zip(range(case["read"]), loader, strict=False):
            pass
        return loader.state_dict()
    dataset.load_state_dict(case["state"])
    loader = DataLoader(dataset, batch_size=case["batch"], num_workers=0)
    return [[int(i) for i in batch["id"]] for batch in loader]


def main() -> None:
    warnings.simplefilter("ignore")
    with open(sys.argv[1]) as handle:
        cases = json.load(handle)
    answers = [_answer(case) for case in cases]
    with open(sys.argv[2], "w") as handle:
        json.dump(answers, handle)


if __name__ == "__main__":
    main()
