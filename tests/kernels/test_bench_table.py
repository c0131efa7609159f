"""kernels/BENCH.md's current tables are generated from the newest bench record of each phase and head count
(`kdakit kernels bench-table`): the committed section must equal the generated one, and the generator picks
those records."""

from __future__ import annotations

import json
import shutil

from kdakit.kernels.tools import bench_table, table

from kdakit.cli import main


def _copy_record(src, dst, **changes):
    (dst / "host").mkdir(parents=True)
    record = json.loads(src.read_text())
    record["config"] = record["config"] | changes.pop("config", {})
    (dst / "host" / "kernels-bench.json").write_text(json.dumps(record | changes))


def test_the_committed_tables_are_the_ones_generated_from_the_newest_records():
    raws = bench_table.current_raws()
    assert bench_table.current() == bench_table.section(raws), "run `kdakit kernels bench-table --write`"
    for raw in raws:
        assert table.render_table(json.loads(raw.read_text())) in bench_table.current()


def test_the_current_records_are_the_newest_of_each_phase_and_head_count(tmp_path):
    records = sorted(bench_table.RECORDS.glob("*/*/kernels-bench.json"))
    phases = {raw: {row["phase"] for row in json.loads(raw.read_text())["rows"]} for raw in records}
    prefill = next(raw for raw in records if phases[raw] == {"prefill"})
    decode = next(raw for raw in records if "decode" in phases[raw] and "prefill" not in phases[raw])
    _copy_record(prefill, tmp_path / "prefill-h16-old", created="2000-01-01", config={"heads": 16})
    _copy_record(prefill, tmp_path / "prefill-h16-new", created="2000-01-03", config={"heads": 16})
    _copy_record(prefill, tmp_path / "prefill-h8", created="2000-01-02", config={"heads": 8})
    _copy_record(decode, tmp_path / "decode-h16", created="1999-12-31", config={"heads": 16})
    chosen = [raw.parent.parent.name for raw in bench_table.current_raws(tmp_path)]
    assert chosen == ["decode-h16", "prefill-h8", "prefill-h16-new"]


def test_the_newest_record_is_chosen_by_its_creation_time(tmp_path):
    [older, newer] = sorted(bench_table.RECORDS.glob("*/*/kernels-bench.json"))[:2]
    for name, src, created in (("b-old", older, "2000-01-02"), ("a-new", newer, "2001-01-01")):
        _copy_record(src, tmp_path / name, created=created)
    assert bench_table.latest_raw(tmp_path).parent.parent.name == "a-new"


def test_the_single_call_table_is_there_only_for_phases_timed_by_single_calls():
    records = [json.loads(p.read_text()) for p in sorted(bench_table.RECORDS.glob("*/*/kernels-bench.json"))]
    heading = "Single-call graph replay"
    prefill_only = [r for r in records if {row["phase"] for row in r["rows"]} == {"prefill"}]
    with_decode = [r for r in records if any(row["phase"] == "decode" for row in r["rows"])]
    assert prefill_only and with_decode
    assert all(heading not in table.render_table(r) for r in prefill_only)
    assert all(heading in table.render_table(r) for r in with_decode)


def test_write_replaces_only_the_section_and_check_reports_a_stale_one(tmp_path, monkeypatch, capsys):
    doc = tmp_path / "BENCH.md"
    shutil.copy(bench_table.BENCH_MD, doc)
    monkeypatch.setattr(bench_table, "BENCH_MD", doc)
    before, section = doc.read_text(), bench_table.current(doc)
    doc.write_text(before.replace(section, section.replace("| phase |", "| phase (edited) |", 1)))
    assert main(["kernels", "bench-table", "--check"]) == 1
    assert main(["kernels", "bench-table", "--write"]) == 0
    assert doc.read_text() == before and main(["kernels", "bench-table", "--check"]) == 0
    assert "up to date" in capsys.readouterr().out
