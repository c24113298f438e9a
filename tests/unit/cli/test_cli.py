"""The ``shardstream`` command as a user drives it: a subprocess, its output, its exit code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tests.cli_run import COLUMNS, run, write

from shardstream import CSVWriter, JSONWriter, LocalDataset, TSVWriter, XSVWriter
from shardstream.cli.main import EXIT_DATA_PROBLEMS, EXIT_FAILED, EXIT_USAGE


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cli") / "ds"
    write(root, 120, compression="zstd", hashes=["sha1", "xxh64"])
    return root


def test_help_lists_every_command_and_the_exit_codes():
    out = run("--help").stdout
    for command in ("convert", "inspect", "head", "validate", "merge", "bench", "simulate"):
        assert command in out
    assert "exit codes" in out


def test_a_wrong_command_line_exits_2():
    assert run("no-such-command", check=None).returncode == EXIT_USAGE
    assert run("inspect", check=None).returncode == EXIT_USAGE  # the dataset is missing


def test_inspect(dataset: Path):
    out = run("inspect", str(dataset)).stdout
    assert "samples      120" in out
    assert "zstd" in out
    assert "sha1, xxh64" in out
    assert "vec" in out
    assert "ndarray:float32:4" in out
    summary = json.loads(run("inspect", str(dataset), "--json").stdout)
    entries = LocalDataset(dataset).shards
    assert summary["shards"] == len(entries) > 1
    assert summary["samples"] == 120
    assert summary["compression"] == {"zstd": len(entries)}
    assert summary["stored_bytes"] == sum(e.data_file.bytes for e in entries)
    names = [c["name"] for c in summary["schemas"][0]["columns"]]
    assert sorted(names) == sorted(COLUMNS)


def test_a_folder_without_an_index_exits_3_naming_it(tmp_path: Path):
    done = run("inspect", str(tmp_path), check=EXIT_FAILED)
    assert str(tmp_path) in done.stderr
    assert "index.json" in done.stderr


def test_head(dataset: Path):
    out = run("head", str(dataset), "-n", "3", "--columns", "id,blob,vec").stdout
    assert out.count("[") >= 3
    assert "[2]" in out
    assert "[3]" not in out
    assert "id: 1" in out
    assert "<1 bytes: 01>" in out
    assert "<ndarray float32 (4,)" in out
    assert "text:" not in out


def test_validate_ok_then_a_corrupt_shard_exits_1_naming_it(dataset: Path, tmp_path: Path):
    out = run("validate", str(dataset), "-q").stdout
    assert out.startswith("OK: ")
    entries = LocalDataset(dataset).shards
    assert f"{2 * len(entries)} digests checked" in out  # two algorithms per stored file
    assert "120 samples decoded" in out
    copy = tmp_path / "copy"
    write(copy, 120, compression="zstd", hashes=["sha1"])
    victim = copy / LocalDataset(copy).shards[1].data_file.basename
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    done = run("validate", str(copy), "--json", check=EXIT_DATA_PROBLEMS)
    report = json.loads(done.stdout)
    assert report["ok"] is False
    assert [p["shard"] for p in report["problems"]] == [
        LocalDataset(copy).shards[1].raw_data.basename
    ]
    assert "sha1 digest" in report["problems"][0]["problem"]
    assert not list(copy.rglob("*.mds"))  # nothing decompressed into the dataset's folder


def test_validate_decodes_every_sample(tmp_path: Path):
    root = tmp_path / "plain"
    write(root, 40)  # no hashes: only decoding can find the damage
    victim = root / LocalDataset(root).shards[0].data_file.basename
    data = bytearray(victim.read_bytes())
    data[8:12] = (10**9).to_bytes(4, "little")  # an offset far past the end
    victim.write_bytes(bytes(data))
    done = run("validate", str(root), check=EXIT_DATA_PROBLEMS)
    assert "PROBLEM shard.00000.mds" in done.stdout


def test_merge_local_partitions(tmp_path: Path):
    root = tmp_path / "merged"
    write(root / "part-10", 7, start=100)
    write(root / "part-2", 5, start=0)
    out = run("merge", str(root)).stdout
    assert "into" in out
    ids = [sample["id"] for sample in LocalDataset(root)]
    assert ids == [*range(5), *range(100, 107)]  # part-2 before part-10
    only = tmp_path / "only"
    write(only / "a", 3)
    write(only / "b", 4, start=10)
    run("merge", str(only), "--partitions", "b")
    assert [s["id"] for s in LocalDataset(only)] == [10, 11, 12, 13]


def test_simulate(dataset: Path, tmp_path: Path):
    args = ["simulate", str(dataset), "--nodes", "2", "--ranks-per-node", "2", "--workers", "2",
            "--batch-size", "4"]  # fmt: skip
    result = json.loads(run(*args, "--json").stdout)
    assert result["job"]["global_batch"] == 16
    assert len(result["nodes"]) == 2
    shards = result["dataset"]["shards"]
    assert sum(node["distinct_shards"] for node in result["nodes"]) >= shards
    for node in result["nodes"]:  # no cache limit: every shard once
        assert node["downloaded_bytes"] == node["min_bytes"]
        assert 0 < node["first_step_bytes"] <= node["min_bytes"]
    assert 0 < result["displacement"] < 1
    tight = json.loads(run(*args, "--cache-limit", "1", "--json").stdout)
    assert any(n["downloads"] > n["distinct_shards"] for n in tight["nodes"])
    figure = tmp_path / "sim.png"
    out = run(*args, "--plot", str(figure)).stdout
    assert "per node" in out
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench(dataset: Path):
    result = json.loads(
        run("bench", str(dataset), "--batch-size", "8", "--epochs", "2", "--json", "-q").stdout
    )
    assert [p["samples"] for p in result["passes"]] == [120, 120]
    assert all(p["samples_per_s"] > 0 and p["first_batch_s"] > 0 for p in result["passes"])


def test_bench_rates_each_pass_against_the_link_the_user_names(dataset: Path):
    args = ("bench", str(dataset), "--batch-size", "8", "--epochs", "2", "-q")
    result = json.loads(run(*args, "--json", "--link-mbps", "250").stdout)
    assert result["link_mbps"] == 250
    for one in result["passes"]:  # a local dataset: the samples' stored bytes read
        assert one["fraction_of_link"] == pytest.approx(one["mb_per_s"] * 8 / 250)
        assert one["fraction_of_link"] > 0
    text = run(*args, "--link-mbps", "1e3").stdout
    assert text.count("of a 1000 Mbit/s link") == 2  # one per pass, beside its MB/s
    # Without a link named, no fraction is made up.
    plain = json.loads(run(*args, "--json").stdout)
    assert "link_mbps" not in plain
    assert all("fraction_of_link" not in one for one in plain["passes"])
    assert "Mbit/s" not in run(*args).stdout


def test_convert_csv_and_jsonl(tmp_path: Path):
    csv = tmp_path / "in.csv"
    csv.write_text("id,name,score\n" + "".join(f"{i},n{i},{i / 2}\n" for i in range(30)))
    run("convert", str(csv), str(tmp_path / "all"), "-q")
    assert LocalDataset(tmp_path / "all")[3] == {"id": 3, "name": "n3", "score": 1.5}
    run("convert", str(csv), str(tmp_path / "some"), "--columns", "id:int16,name:str", "-q")
    ds = LocalDataset(tmp_path / "some")
    assert [s["id"] for s in ds] == list(range(30))
    assert ds[3] == {"id": 3, "name": "n3"}
    assert ds.shards[0].columns["id"] == "int16"
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text("".join(json.dumps({"x": i, "t": "a" * i}) + "\n" for i in range(9)))
    run("convert", str(jsonl), str(tmp_path / "from-jsonl"), "--compression", "none", "-q")
    assert [s["t"] for s in LocalDataset(tmp_path / "from-jsonl")] == ["a" * i for i in range(9)]


def test_convert_parquet_folder_and_images(tmp_path: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    folder = tmp_path / "pq"
    folder.mkdir()
    for part in range(3):
        table = pa.table({"k": list(range(part * 10, part * 10 + 10)), "v": [1.5] * 10})
        pq.write_table(table, folder / f"part-{part}.parquet")
    done = run("convert", str(folder), str(tmp_path / "from-pq"), "-q")
    assert "wrote 30 samples" in done.stdout
    assert sorted(s["k"] for s in LocalDataset(tmp_path / "from-pq")) == list(range(30))
    images = tmp_path / "images"
    for label, colour in (("cat", "red"), ("dog", "blue")):
        (images / label).mkdir(parents=True)
        for i in range(2):
            Image.new("RGB", (8, 8), colour).save(images / label / f"{i}.png")
    run("convert", str(images), str(tmp_path / "from-images"), "--from", "images", "-q")
    ds = LocalDataset(tmp_path / "from-images")
    assert sorted((s["class_name"], s["label"]) for s in ds) == [
        ("cat", 0),
        ("cat", 0),
        ("dog", 1),
        ("dog", 1),
    ]


def test_convert_refuses_what_it_cannot_tell(tmp_path: Path):
    odd = tmp_path / "data.bin"
    odd.write_bytes(b"?")
    done = run("convert", str(odd), str(tmp_path / "out"), check=EXIT_FAILED)
    assert "--from" in done.stderr


@pytest.mark.parametrize(
    ("writer", "kwargs"),
    [(JSONWriter, {}), (CSVWriter, {}), (TSVWriter, {}), (XSVWriter, {"separator": "|"})],
)
def test_inspect_validate_and_head_read_what_the_split_writers_wrote(
    tmp_path: Path, writer: Any, kwargs: dict[str, Any]
):
    root = tmp_path / "ds"
    columns = {"id": "int", "name": "str", "score": "float"}
    with writer(out=str(root), columns=columns, size_limit=200, compression="zstd",
                hashes=["sha1"], **kwargs) as out:  # fmt: skip
        for i in range(50):
            out.write({"id": i, "name": f"name {i}", "score": i / 2})
    fmt = writer(out="x", columns=columns, **kwargs).get_config()["format"]
    summary = json.loads(run("inspect", str(root), "--json").stdout)
    shards = summary["shards"]
    assert shards > 2
    assert summary["formats"] == {fmt: shards}
    assert summary["samples"] == 50
    assert sorted(c["name"] for c in summary["schemas"][0]["columns"]) == sorted(columns)
    report = json.loads(run("validate", str(root), "--json", "-q").stdout)
    # Every shard's data and .meta files have a digest, and every sample decodes.
    assert (report["ok"], report["digests"], report["samples"]) == (True, 2 * shards, 50)
    assert "name: 'name 1'" in run("head", str(root), "-n", "2").stdout
    victim = root / f"shard.00001.{fmt}.meta.zstd"
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    done = run("validate", str(root), "--json", "-q", check=EXIT_DATA_PROBLEMS)
    problems = json.loads(done.stdout)["problems"]
    assert [p["shard"] for p in problems] == [f"shard.00001.{fmt}"]
