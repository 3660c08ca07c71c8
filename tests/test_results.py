import json

import pytest

from harness.validate import invalid_figures
from harness.results import SCHEMA_VERSION, ResultFile, Row, load_result, write_result
from linnet_core.errors import UserError


def sample() -> ResultFile:
    return ResultFile(
        schema_version=SCHEMA_VERSION, model="qwen2-tiny", run_id="r1", created_at="2026-12-02T00:00:00+00:00",
        machine={"cpu": "x"}, workload={"prompt_tokens": 8}, protocol={"profile": "quick"}, weights="synthetic",
        rows=[Row(runner="transformers", label="transformers", group="PyTorch", status="ok", distance=0.0,
                  metrics={"decode_tok_s": 10.0, "decode_tok_s_min": 9.0}, tokens_agree=8)],
    )  # fmt: skip


def test_round_trip_keeps_every_field(tmp_path):
    path = tmp_path / "m" / "r1.json"
    write_result(sample(), path)
    loaded = load_result(path)
    assert loaded == sample()
    assert loaded.rows[0].tokens_agree == 8  # extra fields survive
    assert list(tmp_path.glob("m/.*")) == []  # no temporary file left behind


def test_an_unknown_schema_version_is_refused_with_what_to_do(tmp_path):
    data = json.loads(sample().model_dump_json())
    data["schema_version"] = 99
    (tmp_path / "f.json").write_text(json.dumps(data))
    with pytest.raises(UserError, match="version 99.*linnet-bench run qwen2-tiny"):
        load_result(tmp_path / "f.json")


@pytest.mark.parametrize("text", ["{not json", "[]", '{"schema_version": 1, "model": "m"}'])
def test_malformed_files_are_one_line_errors(tmp_path, text):
    (tmp_path / "f.json").write_text(text)
    with pytest.raises(UserError) as e:
        load_result(tmp_path / "f.json")
    assert "f.json" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [(("protocol", "dtype"), "f32\n vs f16", "protocol.dtype"), (("machine", "cpu"), "x" * 10_000, "machine.cpu"),
     (("model",), "../../etc/passwd", "not a model id"), (("model",), "qwen2\ntiny", "not a model id"),
     (("weights_recipe",), "x" * 10_000, "weights_recipe"), (("weights_recipe",), 5, "weights_recipe"),
     (("weights_recipe",), "trained\n<script>", "weights_recipe"), (("workload", "probe"), "text\n<b>", "workload.probe"),
     (("workload", "probe"), ["text"], "workload.probe"), (("workload", "probe"), "x" * 10_000, "workload.probe")],
)  # fmt: skip
def test_header_text_is_one_short_line_and_a_model_id_names_no_path(tmp_path, field, value, says):
    data = json.loads(sample().model_dump_json())
    where = data
    for key in field[:-1]:
        where = where[key]
    where[field[-1]] = value
    (tmp_path / "f.json").write_text(json.dumps(data))
    with pytest.raises(UserError, match=f"malformed result file: .*{says}") as e:
        load_result(tmp_path / "f.json")
    assert "\n" not in str(e.value) and len(str(e.value)) < 300


@pytest.mark.parametrize("layers", ["24", 24.0, True, -1, 10**30, None])
def test_a_recorded_depth_is_a_whole_number(tmp_path, layers):
    data = json.loads(sample().model_dump_json()) | {"architecture": {"model_type": "qwen2", "layers": layers}}
    (tmp_path / "f.json").write_text(json.dumps(data))
    if layers is None:  # not recorded
        assert load_result(tmp_path / "f.json").architecture["layers"] is None
        return
    with pytest.raises(UserError, match="malformed result file: architecture.layers"):
        load_result(tmp_path / "f.json")


def test_what_the_file_says_reaches_a_message_on_one_line(tmp_path):
    data = json.loads(sample().model_dump_json())
    (tmp_path / "v.json").write_text(json.dumps(data | {"schema_version": 99, "model": "qwen2\ntiny"}))
    (tmp_path / "k.json").write_text(json.dumps(data | {"rows": [{"runner\n": 1}]}))
    for name, says in (("v", "linnet-bench run MODEL"), ("k", "rows.0")):
        with pytest.raises(UserError, match=says) as e:
            load_result(tmp_path / f"{name}.json")
        assert "\n" not in str(e.value), str(e.value)
    figures = invalid_figures(sample().rows[0].model_dump() | {"metrics": {"a\nb": "fast"}})
    assert figures == ["a\\nb is a str 'fast', not a finite number"]


def test_version_1_files_still_load_without_samples(tmp_path):
    data = json.loads(sample().model_dump_json())
    data["schema_version"] = 1
    for row in data["rows"]:
        row.pop("samples"), row.pop("unstable")
    (tmp_path / "v1.json").write_text(json.dumps(data))
    loaded = load_result(tmp_path / "v1.json")
    assert loaded.schema_version == 1 and loaded.rows[0].samples == {} and loaded.rows[0].unstable == []


@pytest.mark.parametrize(
    "samples", ['"fast"', '{"decode_tok_s": [1, 2]}', '{"decode_tok_s": [["a"]]}', '{"decode_tok_s": [[1e999999]]}x']
)
def test_malformed_samples_are_one_line_errors(tmp_path, samples):
    text = sample().model_dump_json().replace('"samples":{}', f'"samples":{samples}', 1)
    assert samples in text
    (tmp_path / "f.json").write_text(text)
    with pytest.raises(UserError) as e:
        load_result(tmp_path / "f.json")
    assert "f.json" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(("section", "key", "value"), [("workload", "seed", -1), ("machine", "cpu", "x" * 10_000)])
def test_a_result_file_is_written_only_when_it_can_be_read_back(tmp_path, section, key, value):
    """`run --seed -1` left a result file that load_result refused, and `check DIR` then refused the whole folder."""
    result = sample()
    getattr(result, section)[key] = value
    with pytest.raises(UserError, match=f"not written: {section}.{key}"):
        write_result(result, tmp_path / "m" / "r.json")
    assert not (tmp_path / "m").exists() or not any((tmp_path / "m").iterdir())


def test_a_lone_surrogate_is_refused_on_reading_and_writing(tmp_path):
    """"\\ud800" is valid JSON but no text: such a file loaded, then `merge` could not write it (a traceback)."""
    data = json.loads(sample().model_dump_json())
    data["rows"][0]["notes"] = ["\ud800"]
    (tmp_path / "s.json").write_text(json.dumps(data))
    with pytest.raises(UserError, match="lone surrogate") as e:
        load_result(tmp_path / "s.json")
    assert "\n" not in str(e.value)
    result = sample()
    result.rows[0].notes = ["\ud800"]
    with pytest.raises(UserError, match="not written"):
        write_result(result, tmp_path / "w.json")
    assert not list(tmp_path.glob("w.json*")) and not list(tmp_path.glob(".w.json*"))
