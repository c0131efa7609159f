"""kernels/BENCH.md's current table is generated from the newest bench record (`kdakit kernels bench-table`):
the committed section must equal the generated one, and the generator picks the newest record."""

from __future__ import annotations

import json
import shutil

from kdakit.kernels.tools import bench_table, table

from kdakit.cli import main


def test_the_committed_table_is_the_one_generated_from_the_newest_record():
    raw = bench_table.latest_raw()
    assert bench_table.current() == bench_table.section(raw), "run `kdakit kernels bench-table --write`"
    assert table.render_table(json.loads(raw.read_text())) in bench_table.current()


def test_the_newest_record_is_chosen_by_its_creation_time(tmp_path):
    [older, newer] = sorted(bench_table.RECORDS.glob("*/*/kernels-bench.json"))[:2]
    for name, src, created in (("b-old", older, "2000-01-02"), ("a-new", newer, "2001-01-01")):
        (tmp_path / name / "host").mkdir(parents=True)
        record = json.loads(src.read_text()) | {"created": created}
        (tmp_path / name / "host" / "kernels-bench.json").write_text(json.dumps(record))
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
