"""A small W3C WebDriver client for Debian's chromium-driver (standard library only): start chromedriver,
open one headless Chromium session at a given window size, load a page, run a script, quit."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

CHROMIUM_NAMES = ("chromium", "chromium-browser")


def missing() -> str | None:
    """Why a browser session cannot start here (None: it can)."""
    if not any(shutil.which(n) for n in CHROMIUM_NAMES):
        return "no chromium (Debian package chromium)"
    if not shutil.which("chromedriver"):
        return "no chromedriver (Debian package chromium-driver)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Browser:
    def __init__(self, width: int = 1280, height: int = 1000, timeout_s: float = 60):
        self.port = _free_port()
        self.timeout_s = timeout_s
        self.driver = subprocess.Popen(
            [shutil.which("chromedriver"), f"--port={self.port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if self._call("GET", "/status")["ready"]:
                    break
            except (OSError, urllib.error.URLError):
                pass
            if time.monotonic() > deadline:
                self.driver.kill()
                raise TimeoutError(f"chromedriver did not answer within {timeout_s:.0f} s")
            time.sleep(0.2)
        binary = next(shutil.which(n) for n in CHROMIUM_NAMES if shutil.which(n))
        args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={width},{height}"]  # fmt: skip
        options = {"binary": binary, "args": args}
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": options}}}
        self.session = self._call("POST", "/session", caps)["sessionId"]

    def _call(self, method: str, path: str, body: dict | None = None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})  # fmt: skip
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
            return json.loads(response.read())["value"]

    def open(self, page: Path) -> None:
        self._call("POST", f"/session/{self.session}/url", {"url": Path(page).resolve().as_uri()})

    def run(self, script: str):
        """The value a script (a function body: `return ...`) returns in the page."""
        return self._call("POST", f"/session/{self.session}/execute/sync", {"script": script, "args": []})

    def close(self) -> None:
        try:
            self._call("DELETE", f"/session/{self.session}")
        finally:
            self.driver.terminate()
            try:
                self.driver.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.driver.kill()

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
