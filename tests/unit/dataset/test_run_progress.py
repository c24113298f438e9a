"""RunProgress: the next epoch and a resume point, in the rank process and across its workers."""

from __future__ import annotations

import multiprocessing
import os
import pickle
from pathlib import Path

from shardstream.cache import EpochStart
from shardstream.dataset.run_progress import RunProgress, runs_folder


def test_the_rank_process_runs_epochs_in_turn_and_resumes_once(tmp_path: Path):
    progress = RunProgress()
    folder = str(tmp_path / "runs")
    assert progress.claim(None, lambda: folder) == EpochStart(0)
    assert progress.claim(None, lambda: folder) == EpochStart(1)
    progress.resume_at(EpochStart(4, 96), lambda: folder)
    assert progress.current_start(lambda: folder) == EpochStart(4, 96)
    assert progress.claim(None, lambda: folder) == EpochStart(4, 96)
    assert progress.claim(None, lambda: folder) == EpochStart(5)
    progress.set_epoch(2, lambda: folder)
    assert progress.claim(None, lambda: folder) == EpochStart(2)


def test_workers_take_a_resume_point_each_once(tmp_path: Path):
    progress = RunProgress()
    folder = str(tmp_path / "runs")
    progress.rank_process = os.getpid()
    progress.resume_at(EpochStart(3, 40), lambda: folder)
    assert [progress.claim((w, 2), lambda: folder) for w in range(2)] == [EpochStart(3, 40)] * 2
    assert progress.claim((0, 2), lambda: folder) == EpochStart(4)
    assert progress.current_start(lambda: folder).epoch in (3, 4)


def test_a_note_is_said_at_its_level_once(tmp_path: Path):
    progress = RunProgress()
    folder = str(tmp_path / "runs")
    progress.rank_process = os.getpid()
    assert progress.once(None, "dropped 3", 30, lambda: folder) == 30
    assert progress.once(None, "dropped 3", 30, lambda: folder) == 10
    progress.claim((0, 2), lambda: folder)  # a worker began: the run state holds the notes
    assert progress.once((0, 2), "padding 1", 20, lambda: folder) == 20
    assert progress.once((1, 2), "padding 1", 20, lambda: folder) == 10


def _send(answer: multiprocessing.SimpleQueue[tuple[int, bytes]]) -> None:
    answer.put((os.getpid(), pickle.dumps(RunProgress())))


def _receive(data: bytes, answer: multiprocessing.SimpleQueue[tuple[int, int]]) -> None:
    answer.put((os.getppid(), pickle.loads(data).rank_process_of_worker()))


def test_a_copy_received_in_another_process_names_its_sender_not_the_parent():
    context = multiprocessing.get_context("spawn")
    sent: multiprocessing.SimpleQueue[tuple[int, bytes]] = context.SimpleQueue()
    sender = context.Process(target=_send, args=(sent,))
    sender.start()
    sender_pid, data = sent.get()
    sender.join(60)
    received: multiprocessing.SimpleQueue[tuple[int, int]] = context.SimpleQueue()
    receiver = context.Process(target=_receive, args=(data, received))
    receiver.start()
    parent, named = received.get()
    receiver.join(60)
    assert parent == os.getpid() != sender_pid
    assert named == sender_pid


def test_run_files_of_local_only_data_go_to_the_cache_root(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("SHARDSTREAM_CACHE_DIR", str(tmp_path / "root"))
    assert runs_folder(None) == str(tmp_path / "root" / "runs")
    assert (tmp_path / "root").is_dir()
    assert runs_folder(str(tmp_path / "state")) == str(tmp_path / "state" / "runs")
