"""The JSONL readers of skill_rl/files.py: `read_objects` (input a person wrote: every bad line one problem naming
file, line and field, the others read) and `read_records` (records a run appends: a torn line dropped)."""

import json

import pytest

from skill_rl import files
from skill_rl.files import read_objects, read_records


def objects(path):
    problems = []
    return list(read_objects(path, problems, " with id")), problems


@pytest.mark.parametrize(
    "line, problem",
    [
        ('{"id": "a", "id": "b"}', "field 'id' is given twice"),
        ('{"id": {"x": 1, "x": 2}}', "field 'x' is given twice"),
        ('{"id": }', "invalid JSON at column 8: Expecting value"),
        ('["a"]', "each line must be a JSON object with id, got list"),
        ("[" * 100_000, "invalid JSON: nested too deeply"),
    ],
)
def test_a_bad_line_is_one_problem_naming_file_and_line_and_the_next_line_is_read(tmp_path, line, problem):
    path = tmp_path / "in.jsonl"
    path.write_text(line + "\n" + '{"id": "ok"}\n')
    assert objects(path) == ([(2, {"id": "ok"})], [f"{path}:1: {problem}"])


def test_a_byte_order_mark_blank_lines_and_crlf_are_read_and_bad_utf8_is_a_problem(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"id": "a"}\r\n\n   \n{"id": "\xe9"}\n{"id": "c"}')
    assert objects(path) == (
        [(1, {"id": "a"}), (5, {"id": "c"})],
        [f"{path}:4: line is not valid UTF-8 (byte 0xe9 at column 9)"],
    )


def test_a_line_over_the_bound_is_skipped_whole_and_a_file_over_its_bound_is_read_no_further(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "MAX_LINE_BYTES", 20)
    monkeypatch.setattr(files, "MAX_FILE_BYTES", 80)
    # 61 bytes, then 13 a line: the third line ends at byte 87
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": "' + "x" * 50 + '"}\n{"id": "b"}\n{"id": "c"}\n{"id": "d"}\n')
    found, problems = objects(path)
    assert found == [(2, {"id": "b"})]
    assert problems == [
        f"{path}:1: line is longer than 20 bytes",
        f"{path}:3: file is larger than 80 bytes; the rest is not read",
    ]


def test_a_file_that_cannot_be_read_is_one_problem(tmp_path):
    assert objects(tmp_path) == ([], [f"{tmp_path}: cannot read file: Is a directory"])


def test_records_keep_every_whole_object_and_drop_a_torn_line_and_anything_else(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps({"a": 1}) + "\n[1]\n\n" + json.dumps({"a": 2}) + "\n" + '{"a": 3, "b')
    assert read_records(path) == [{"a": 1}, {"a": 2}]
    assert read_records(tmp_path / "none.jsonl") == []
