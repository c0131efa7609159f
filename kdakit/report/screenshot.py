"""`python -m kdakit.report.screenshot REPORT_HTML OUT_PNG`: the whole report page as a reader sees it at
1280 px, taken by headless Chromium and reduced to a palette PNG (small enough to keep in the docs).

Chromium's command line shoots its window only, so the window is made taller than the page (doubled until
the page ends above its bottom edge) and the empty background below the page is cut off."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

WIDTH, HEIGHT = 1280, 8000
MOST_HEIGHT = 64000  # a page taller than this is cut there (said on stderr)
MARGIN = 24  # background kept below the page's last row
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
        while True:
            argv = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--user-data-dir={tmp}/profile", f"--window-size={width},{height}",
                    f"--screenshot={raw}", Path(page).resolve().as_uri()]  # fmt: skip
            subprocess.run(argv, capture_output=True, timeout=timeout_s, check=True)
            image = Image.open(raw).convert("RGB")
            bottom = _content_bottom(image)
            if bottom + MARGIN < image.height or height >= MOST_HEIGHT:
                break
            height = min(2 * height, MOST_HEIGHT)
        if bottom + MARGIN >= image.height:
            print(f"screenshot: the page is taller than {image.height} px; cut there", file=sys.stderr)
        image = image.crop((0, 0, image.width, min(image.height, bottom + MARGIN)))
        image = image.quantize(colors=256, method=Image.Quantize.FASTOCTREE)
        out.parent.mkdir(parents=True, exist_ok=True)
        image.save(out, optimize=True)
    return out


def _content_bottom(image) -> int:
    """The last row that differs from the page's background (the bottom-left pixel's colour)."""
    from PIL import Image, ImageChops

    background = image.getpixel((0, image.height - 1))
    box = ImageChops.difference(image, Image.new(image.mode, image.size, background)).getbbox()
    return box[3] if box else 0


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
