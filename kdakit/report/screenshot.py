"""`python -m kdakit.report.screenshot REPORT_HTML OUT_PNG`: the top of a report page as a reader sees it at
1280 px, taken by headless Chromium and reduced to a palette PNG (small enough to keep in the docs)."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

WIDTH, HEIGHT = 1280, 3200
BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def browser() -> str | None:
    return next((found for name in BROWSERS if (found := shutil.which(name))), None)


def screenshot(
    page: Path, out: Path, width: int = WIDTH, height: int = HEIGHT, timeout_s: float = 120
) -> Path:
    from PIL import Image

    binary = browser()
    if binary is None:
        raise FileNotFoundError(f"no headless browser ({', '.join(BROWSERS)}): install Debian's chromium")
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "page.png"
        argv = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                f"--user-data-dir={tmp}/profile", f"--window-size={width},{height}",
                f"--screenshot={raw}", Path(page).resolve().as_uri()]  # fmt: skip
        subprocess.run(argv, capture_output=True, timeout=timeout_s, check=True)
        image = Image.open(raw).convert("RGB").quantize(colors=256, method=Image.Quantize.FASTOCTREE)
        out.parent.mkdir(parents=True, exist_ok=True)
        image.save(out, optimize=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kdakit.report.screenshot", description=__doc__.split("\n")[0]
    )
    parser.add_argument("page", help="report.html")
    parser.add_argument("out", help="the PNG to write")
    args = parser.parse_args(argv)
    try:
        print(f"wrote {screenshot(Path(args.page), Path(args.out))}")
    except (FileNotFoundError, subprocess.SubprocessError) as exc:
        print(f"screenshot: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
