"""Who may use the server: SGLang 0.5.23's own auth middleware refuses requests without the run's keys, the
test double refuses exactly the same ones, and the keys stay out of every record."""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from kdakit.launch import access

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

HERE = Path(__file__).parent
spec = importlib.util.spec_from_file_location(
    "kdakit_test_fake_openai_access", HERE / "fakes" / "openai_server.py"
)
fake = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = fake
spec.loader.exec_module(fake)

API_KEY = "run-api-key-" + "k" * 32
ADMIN_KEY = "run-admin-key-" + "a" * 32
BEARER, ADMIN_BEARER = f"Bearer {API_KEY}", f"Bearer {ADMIN_KEY}"

# (method, path, Authorization header) -> allowed? with both keys set, as the kit serves.
CONTRACT = [
    ("POST", "/v1/chat/completions", None, False),
    ("POST", "/v1/chat/completions", "Bearer wrong-key", False),
    ("POST", "/v1/chat/completions", API_KEY, False),  # no "Bearer " scheme
    ("POST", "/v1/chat/completions", ADMIN_BEARER, False),  # the admin key does not open normal paths
    ("POST", "/v1/chat/completions", BEARER, True),
    ("POST", "/generate", None, False),
    ("GET", "/v1/models", None, False),
    ("GET", "/server_info", None, False),
    ("POST", "/flush_cache", None, False),
    ("POST", "/flush_cache", BEARER, False),  # admin paths take only the admin key
    ("POST", "/flush_cache", ADMIN_BEARER, True),
    ("GET", "/health", None, True),  # probes and scraping stay open: the kit binds to loopback for that
    ("GET", "/metrics", None, True),
]


def sglang_routes() -> list[tuple[str, list[str], str]]:
    """(path, methods, auth level) of every route in the pinned wheel's http_server.py, read from its source
    (the module itself needs the GPU stack to import)."""
    import sglang

    source = Path(sglang.__file__).parent / "srt" / "entrypoints" / "http_server.py"
    routes = []
    for node in ast.walk(ast.parse(source.read_text())):
        if not isinstance(node, ast.AsyncFunctionDef | ast.FunctionDef):
            continue
        level, paths = "normal", []
        for deco in node.decorator_list:
            if not isinstance(deco, ast.Call) or not isinstance(deco.func, ast.Attribute | ast.Name):
                continue
            name = deco.func.attr if isinstance(deco.func, ast.Attribute) else deco.func.id
            if name == "auth_level" and isinstance(deco.args[0], ast.Attribute):
                level = deco.args[0].attr.lower()
            elif name in ("get", "post", "put", "delete", "api_route") and deco.args:
                if isinstance(deco.args[0], ast.Constant):
                    methods = [name.upper()]
                    for kw in deco.keywords:
                        if kw.arg == "methods":
                            methods = [e.value for e in kw.value.elts]
                    paths.append((deco.args[0].value, methods))
        routes += [(path, methods, level) for path, methods in paths]
    return routes


@pytest.fixture(scope="module")
def sglang_client():
    """SGLang's own auth middleware (sglang.srt.utils.auth) in front of stub routes with the real server's
    paths and auth levels; a request it lets through reaches the stub (200; /metrics, which SGLang mounts
    apart from these routes, 404)."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient
    from sglang.srt.utils.auth import AuthLevel, add_api_key_middleware, auth_level

    app = FastAPI()
    for path, methods, level in sglang_routes():

        async def endpoint():
            return {"ok": True}

        if level != "normal":
            endpoint = auth_level(AuthLevel(level))(endpoint)
        app.add_api_route(path, endpoint, methods=methods)
    add_api_key_middleware(app, api_key=API_KEY, admin_api_key=ADMIN_KEY)
    return TestClient(app)


@pytest.fixture(scope="module")
def double_url():
    proc, url = fake.start_background("--api-key", API_KEY, "--admin-api-key", ADMIN_KEY, "--enable-metrics")
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def test_the_wheel_marks_flush_cache_admin_and_the_double_knows_its_admin_paths():
    levels = {path: level for path, _, level in sglang_routes()}
    assert levels["/flush_cache"] == "admin_optional" and levels["/v1/chat/completions"] == "normal"
    assert {p for p in fake.ADMIN_PATHS if levels.get(p) != "admin_optional"} == set()


@pytest.mark.parametrize("method, path, header, allowed", CONTRACT)
def test_sglang_refuses_what_the_kit_keys_do_not_open(sglang_client, method, path, header, allowed):
    headers = {"Authorization": header} if header else {}
    r = sglang_client.request(method, path, headers=headers, json={})
    assert (r.status_code not in (401, 403)) == allowed, (r.status_code, r.text)
    if not allowed:
        assert r.status_code == 401 and r.json() == {"error": "Unauthorized"}


@pytest.mark.parametrize("method, path, header, allowed", CONTRACT)
def test_the_double_enforces_the_same_header_contract(double_url, method, path, header, allowed):
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}).encode()
    req = urllib.request.Request(double_url + path, data=body if method == "POST" else None, method=method)
    req.add_header("Content-Type", "application/json")
    if header:
        req.add_header("Authorization", header)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            status = resp.status
    except urllib.error.HTTPError as exc:
        status = exc.code
        assert status != 401 or json.loads(exc.read()) == {"error": "Unauthorized"}
    assert (status == 200) == allowed, status


def test_the_env_file_keys_are_new_per_run_and_kept_within_a_run():
    first = access.parse_env_text(access.env_file_lines("run-a"))
    assert first[access.KEYS_RUN_ENV] == "run-a" and len(first[access.API_KEY_ENV]) >= 40
    assert first[access.API_KEY_ENV] != first[access.ADMIN_API_KEY_ENV]
    text = "HF_TOKEN=x\n" + "".join(f"{k}={v}\n" for k, v in first.items())
    assert access.env_file_lines("run-a", text) == access.env_file_lines("run-a", text)  # a second deploy
    assert access.parse_env_text(access.env_file_lines("run-a", text)) == first
    other = access.parse_env_text(access.env_file_lines("run-b", text))
    assert other[access.API_KEY_ENV] != first[access.API_KEY_ENV]


def test_the_controller_command_reads_the_previous_file_on_stdin():
    previous = access.env_file_lines("r1")
    out = subprocess.run(
        [sys.executable, "-m", "kdakit.launch.access", "env-file", "--run-id", "r1"],
        input=previous, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert out == previous


def test_server_info_and_launch_commands_are_redacted():
    info = {
        "api_key": API_KEY,
        "admin_api_key": ADMIN_KEY,
        "launch_command": f"sglang serve --port 1 --api-key {API_KEY} --admin-api-key={ADMIN_KEY}",
        "argv": ["sglang", "serve", "--api-key", API_KEY],
        "tp_size": 4,
        "note": f"key {API_KEY} inside",
    }
    out = access.redact(info, [API_KEY, ADMIN_KEY])
    assert API_KEY not in json.dumps(out) and ADMIN_KEY not in json.dumps(out)
    assert out["tp_size"] == 4 and out["argv"] == ["sglang", "serve", "--api-key", "<redacted>"]
    # Without the keys at hand, the flags' values and the fields still go.
    out = access.redact(info, [])
    assert out["api_key"] == "<redacted>" and API_KEY not in out["launch_command"]
    assert ADMIN_KEY not in out["launch_command"]


def test_scrub_tree_replaces_the_keys_in_raw_files(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "run1.jsonl").write_text(json.dumps({"server_info": {"api_key": API_KEY}}) + "\n")
    (tmp_path / "clean.txt").write_text("nothing here\n")
    changed = access.scrub_tree(tmp_path, [API_KEY])
    assert changed == [tmp_path / "a" / "run1.jsonl"]
    assert API_KEY not in (tmp_path / "a" / "run1.jsonl").read_text()


def test_a_tools_output_is_written_privately_and_lands_scrubbed(tmp_path):
    key = "run-key-" + "k" * 35
    target = tmp_path / "results" / "run1.jsonl"
    target.parent.mkdir()
    with access.private_output(target, [key]) as written:
        assert written.parent.stat().st_mode & 0o777 == 0o700 and tmp_path not in written.parents
        written.write_text(f'{{"server_info": {{"api_key": "{key}"}}}}\n')  # as SGLang's client does
        assert not target.exists()  # nothing in the results holds the key, at any moment
    assert target.read_text() == '{"server_info": {"api_key": "<redacted>"}}\n'
    assert not written.parent.exists()
