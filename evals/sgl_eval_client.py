"""sgl-eval (`sgl-eval run gsm8k`, unchanged) offline on the kit's GSM8K copy, with the run's API key.

    python -m kdakit.evals.sgl_eval_client --gsm8k-dir DIR --prepared-dir OUT [sgl-eval run arguments ...]

- The data: sgl-eval's own GSM8K preparation (its vendored NeMo-Skills `prepare.py`: question -> problem, the
  number after "####" -> expected_answer) runs on DIR's test.jsonl instead of its download, the way sgl-eval
  itself feeds that script a verified local archive; the result, OUT/test.jsonl, is passed as
  `--from-dataset`. The questions, their order, the prompt and the scorer stay sgl-eval's.
- The key: sgl-eval sends only `--api-key` (default "EMPTY"); the kit's server wants the run's key, which
  reaches this process in $OPENAI_API_KEY and is added here, never on a command line another user can read.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

PREPARE_MODULE = "sgl_eval._vendored.nemo_skills.dataset.gsm8k.prepare"


def prepare(gsm8k_dir: Path, out_dir: Path) -> Path:
    """sgl-eval's GSM8K test split, prepared by its own script from the kit's copy (no download)."""
    module = importlib.import_module(PREPARE_MODULE)
    out_dir.mkdir(parents=True, exist_ok=True)
    url, file = module.URL, module.__file__
    module.URL = gsm8k_dir.resolve().as_uri() + "/{}.jsonl"  # urlretrieve reads file: URLs
    module.__file__ = str(out_dir / "prepare.py")  # it writes beside its own file
    try:
        module.save_data("test")
    finally:
        module.URL, module.__file__ = url, file
    return out_dir / "test.jsonl"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kdakit.evals.sgl_eval_client", add_help=False)
    parser.add_argument("--gsm8k-dir", required=True, type=Path)
    parser.add_argument("--prepared-dir", required=True, type=Path)
    ours, rest = parser.parse_known_args(argv)
    data = prepare(ours.gsm8k_dir, ours.prepared_dir)
    key = os.environ.get("OPENAI_API_KEY") or "EMPTY"
    from sgl_eval.cli import main as sgl_eval_main

    return sgl_eval_main([*rest, "--from-dataset", str(data), "--api-key", key])


if __name__ == "__main__":
    sys.exit(main())
