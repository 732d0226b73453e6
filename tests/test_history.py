"""A run's history.jsonl, read in one place (skill_rl/training/history.py): a last line cut short by a crash is
skipped by every reader, and `mend` ends it before a resumed run logs, so that the next row is a line of its own."""

import json

import pytest

from skill_rl.training import history
from skill_rl.training.backends import best_step
from skill_rl.training.monitor import Monitor

ROWS = [
    {"step": 0, "val/reward": 0.2, "val/skill/reward": 0.3, "recorded_at": "t"},
    {
        "step": 1,
        "train/reward": 0.5,
        "train/monitor/length": 40.0,
        "train/monitor/gap/format": 0.1,
        "train/monitor/constant/type": 2.0,
    },
    {"step": 1, "val/reward": 0.6},
    {"step": 2, "train/reward": 0.7, "train/monitor/length": 55.0, "train/monitor/constant/type": 3.0},
    {"step": 2, "val/reward": 0.4},
]
TORN = b'{"step": 3, "train/reward": 0.9, "train/monit'


def write(path, rows, tail=b""):
    path.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in rows) + tail)
    return path


def test_rows_skip_a_torn_last_line_and_rows_without_a_whole_number_step(tmp_path):
    odd = [{"step": "4", "train/reward": 1.0}, {"step": True, "val/reward": 1.0}, {"train/reward": 1.0}]
    path = write(tmp_path / history.NAME, ROWS + odd, b"[1, 2]\n" + TORN)
    assert history.rows(path) == ROWS
    assert history.rows(tmp_path / "none.jsonl") == []


def test_a_metric_that_is_not_a_number_is_none(tmp_path):
    rows = history.rows(
        write(
            tmp_path / history.NAME,
            [{"step": 1, "val/reward": "high"}, {"step": 2, "val/reward": True}, {"step": 3, "val/reward": 0.5}],
        )
    )
    assert history.values(rows, "val/reward") == [(3, 0.5)]


def test_every_reader_of_a_torn_history_reads_the_whole_rows(tmp_path):
    path = write(tmp_path / history.NAME, ROWS, TORN)
    monitor = Monitor.resume(path)
    assert monitor.first_length == 40.0 and monitor.first_gap == {"format": 0.1} and monitor.constant == {"type": 3}
    assert best_step(path) == (1, 0.6)


# training/steps.py imports ART (torch)
@pytest.mark.slow
def test_the_internalize_arms_of_a_torn_history_are_its_whole_rows(tmp_path):
    from skill_rl.training.steps import arms

    path = write(tmp_path / history.NAME, ROWS, TORN)
    assert [(a["arm"], a["reward"]) for a in arms(path, 2)] == [
        ("base model, with SKILL.md", 0.3),
        ("base model, without SKILL.md", 0.2),
        ("trained @2, without SKILL.md", 0.4),
    ]


def test_mend_ends_a_torn_last_line_keeps_its_bytes_and_names_its_line(tmp_path, capsys):
    path = write(tmp_path / history.NAME, ROWS, TORN)
    history.mend(path)
    assert path.read_bytes().endswith(b"\n" + TORN + b"\n")
    assert capsys.readouterr().err == (
        f"warning: {path}:{len(ROWS) + 1}: the last line was cut short (a crash?); it is "
        "skipped, and the run logs on from the next line\n"
    )
    # as ART's model.log appends
    with path.open("a") as f:
        f.write(json.dumps({"step": 3, "train/reward": 0.9}) + "\n")
    assert history.rows(path)[-1] == {"step": 3, "train/reward": 0.9}


def test_mend_leaves_a_whole_or_missing_history_alone(tmp_path, capsys):
    path = write(tmp_path / history.NAME, ROWS)
    before = path.read_bytes()
    history.mend(path)
    history.mend(tmp_path / "none.jsonl")
    (tmp_path / "empty.jsonl").write_bytes(b"")
    history.mend(tmp_path / "empty.jsonl")
    assert path.read_bytes() == before and not (tmp_path / "none.jsonl").exists()
    assert (tmp_path / "empty.jsonl").read_bytes() == b"" and capsys.readouterr().err == ""
