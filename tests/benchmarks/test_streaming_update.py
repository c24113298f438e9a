"""Merging a partial re-run of the streaming driver into its earlier report."""

from __future__ import annotations

from typing import Any

import pytest
from benchmarks.streaming_update import SHARED, check_compatible, merge_rerun, rerun_settings


def _setting(rate: float) -> dict[str, Any]:
    return {lib: {"samples_per_s": {"best": rate}, "checks_passed": True}
            for lib in ("shardstream", "reference")}  # fmt: skip


def _header(created: str) -> dict[str, Any]:
    return {
        "created": created,
        "libs": ["shardstream", "reference"],
        "quick": False,
        "issue_sizes": False,
        "batch_size": 256,
        "seed": 1,
        "timed_epochs": 2,
        "ttfb_repeats": 3,
    }


def _earlier() -> dict[str, Any]:
    return {
        **_header("06:00"),
        "wall_seconds": 4800.0,
        "epoch": {
            "small-1KiB": {"params": {"samples": 10}, "runs": {"workers=0": _setting(1.0)}},
            "tokens-2048": {
                "params": {"samples": 20},
                "runs": {"workers=0": _setting(2.0), "workers=2": _setting(3.0)},
            },
        },
        "ttfb_by_shards": {
            "100": {"params": {"n": 1}, "runs": {"workers=0": _setting(4.0)}},
            "10000": {"params": {"n": 2}, "runs": {"workers=0": _setting(5.0)}},
        },
        "resume": {"params": {"samples": 10}, "runs": {"workers=0": _setting(6.0)}},
    }


def test_only_the_settings_measured_again_change():
    earlier = _earlier()
    now = {
        **_header("11:00"),
        "wall_seconds": 300.0,
        "epoch": {"tokens-2048": {"params": {"samples": 20}, "runs": {"workers=2": _setting(9)}}},
        "ttfb_by_shards": {"100": {"params": {"n": 1}, "runs": {"workers=0": _setting(8.0)}}},
        "resume": {"params": {"samples": 10}, "runs": {"workers=2": _setting(7.0)}},
    }
    merged = merge_rerun(earlier, now)
    runs = merged["epoch"]["tokens-2048"]["runs"]
    assert runs["workers=2"] == _setting(9)
    assert runs["workers=0"] == _setting(2.0)  # not measured again: kept
    assert merged["epoch"]["small-1KiB"] == earlier["epoch"]["small-1KiB"]
    assert merged["ttfb_by_shards"]["100"]["runs"]["workers=0"] == _setting(8.0)
    assert merged["ttfb"] is merged["ttfb_by_shards"]["10000"]
    assert merged["resume"]["runs"] == {"workers=0": _setting(6.0), "workers=2": _setting(7.0)}
    assert merged["created"] == "06:00"  # the report is still the full run's
    assert merged["reruns"] == [
        {
            "created": "11:00",
            "wall_seconds": 300.0,
            "settings": [
                "epoch/tokens-2048/workers=2",
                "ttfb/100 shards/workers=0",
                "resume/workers=2",
            ],
        }
    ]
    assert earlier == _earlier()  # the earlier report itself is left as it was
    again = merge_rerun(merged, {**_header("12:00"), "resume": now["resume"]})
    assert [rerun["created"] for rerun in again["reruns"]] == ["11:00", "12:00"]
    assert again["reruns"][0]["settings"] == [
        "epoch/tokens-2048/workers=2",
        "ttfb/100 shards/workers=0",
    ]
    assert again["reruns"][1]["settings"] == ["resume/workers=2"]
    whole = {key: value for key, value in now.items() if key != "resume"}
    latest = merge_rerun(again, {**whole, "created": "13:00"})
    assert [rerun["created"] for rerun in latest["reruns"]] == [
        "12:00",
        "13:00",
    ]  # 11:00's all measured again
    assert rerun_settings({"epoch": {}}) == []


def test_a_case_the_earlier_run_lacks_is_added_whole():
    now = {**_header("11:00"), "s3_cold": {"small-1KiB": {"runs": {"workers=0": _setting(1)}}}}
    merged = merge_rerun(_earlier(), now)
    assert merged["s3_cold"] == now["s3_cold"]


@pytest.mark.parametrize("key", SHARED)
def test_a_re_run_with_other_options_is_refused(key):
    now = {**_header("11:00"), key: "something else"}
    with pytest.raises(ValueError, match=f"{key}: the re-run has 'something else'"):
        check_compatible(_earlier(), now)
    with pytest.raises(ValueError, match=key):
        merge_rerun(_earlier(), now)


def test_a_case_measured_at_other_sizes_is_refused():
    now = {
        **_header("11:00"),
        "epoch": {"tokens-2048": {"params": {"samples": 2}, "runs": {"workers=2": _setting(9)}}},
    }
    with pytest.raises(ValueError, match="epoch/tokens-2048: the re-run's parameters"):
        merge_rerun(_earlier(), now)
