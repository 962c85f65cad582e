"""Open `lpdt ui` in headless Chromium with a fresh profile, click a run in the runs table, and
say (and screenshot) which view its page opened in.

    .venv/bin/python tools/ui_screenshots.py --uri sqlite:///results/mlflow.db --out shots/
    .venv/bin/python tools/ui_screenshots.py --uri ... --plain   # MLflow's own app, for contrast

It starts the server (`lpdt ui`, or with --plain `mlflow ui` without lpdt's app) on 127.0.0.1 and
Debian's `chromium` with an empty `--user-data-dir` (no stored view), drives Chromium over the
DevTools protocol on a pipe (`--remote-debugging-pipe`: JSON messages ended by a NUL byte, no
extra package), opens the address `lpdt ui` prints, clicks a run's name in the table with a real
mouse event, and writes mlflow-table.png, mlflow-run.png, mlflow-metrics.png (the run page's
"Model metrics" tab) and mlflow-sys.png ("System metrics"), and view.json: what the run page
showed (its breadcrumb, its tabs, the stored view). Every wait is bounded; the server and the
browser are stopped by their process ids. tests/tracking/test_webapp.py runs it (slow).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
WAIT_S = 60.0  # the longest wait for one thing: the server, a page, an element


class Chromium:
    """Headless Chromium driven over ``--remote-debugging-pipe`` (fd 3: commands in, fd 4:
    replies and events out), one page attached with a flat session."""

    def __init__(self, binary: str, profile: Path, size: tuple[int, int], log: Any) -> None:
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def fds() -> None:  # in the child: the protocol's fds 3 and 4
            read, write = os.dup(to_browser_r), os.dup(from_browser_w)  # above 4: no clash
            os.dup2(read, 3)
            os.dup2(write, 4)

        self.proc = subprocess.Popen(
            [
                binary,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--no-default-browser-check",
                "--remote-debugging-pipe",
                f"--user-data-dir={profile}",
                f"--window-size={size[0]},{size[1]}",
                "about:blank",
            ],
            preexec_fn=fds,
            close_fds=False,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next = 0
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        self.page("Page.enable")
        self.page(
            "Emulation.setDeviceMetricsOverride",
            width=size[0],
            height=size[1],
            deviceScaleFactor=1,
            mobile=False,
        )

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("Chromium did not answer")
            ready, _, _ = select.select([self._from_browser], [], [], 1.0)
            if ready:
                chunk = os.read(self._from_browser, 1 << 20)
                if not chunk:
                    raise RuntimeError("Chromium closed its pipe")
                self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        self._next += 1
        ident = self._next
        message: dict[str, Any] = {"id": ident, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + WAIT_S
        while True:
            reply = self._read(deadline)
            if reply.get("id") == ident:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return dict(reply.get("result", {}))

    def page(self, method: str, **params: Any) -> dict[str, Any]:
        return self.call(method, self.session, **params)

    def eval(self, expression: str) -> Any:
        reply = self.page("Runtime.evaluate", expression=expression, returnByValue=True)
        return reply.get("result", {}).get("value")

    def wait(self, expression: str, what: str, timeout_s: float = WAIT_S) -> Any:
        deadline = time.monotonic() + timeout_s
        while True:
            value = self.eval(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout_s:g} s for {what}")
            time.sleep(0.5)

    def click(self, x: float, y: float) -> None:
        for kind in ("mousePressed", "mouseReleased"):
            self.page("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def screenshot(self, path: Path) -> None:
        self.page("Input.dispatchMouseEvent", type="mouseMoved", x=1, y=1)  # no hover effects
        data = self.page("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, TimeoutError, OSError):
            self.call("Browser.close")
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        os.close(self._to_browser)
        os.close(self._from_browser)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(uri: str, port: int, plain: bool, log: Path) -> tuple[subprocess.Popen, str]:
    """`lpdt ui` (or, with ``plain``, MLflow's own `mlflow ui`) on 127.0.0.1:port, in a session
    of its own (so that its uvicorn worker is stopped with it); the address it prints."""
    if plain:
        sys.path.insert(0, str(REPO / "src"))
        from lpdt.tracking import artifacts_root, open_client

        exp = open_client(uri).get_experiment_by_name("lpdt")
        cmd = [PY, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--workers", "1"]
        root = artifacts_root(uri)
        if root is not None:
            cmd += ["--artifacts-destination", str(root.resolve())]
        cmd += ["--host", "127.0.0.1", "--port", str(port)]
        url = f"http://127.0.0.1:{port}/#/experiments/{exp.experiment_id}/runs"
    else:
        cmd = [str(Path(PY).with_name("lpdt")), "ui", "--uri", uri, "--port", str(port)]
        url = ""
    out = log.open("w")
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + WAIT_S
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited: {log.read_text()[-2000:]}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the server did not answer in {WAIT_S:g} s") from None
            time.sleep(0.5)
    if not url:  # the table's address, as `lpdt ui` printed it
        found = re.search(r"^  (http://\S+)$", log.read_text(), re.M)
        if found is None:
            raise RuntimeError(f"no address in lpdt ui's output: {log.read_text()[:2000]}")
        url = found.group(1)
    return proc, url


def stop(proc: subprocess.Popen) -> None:
    """Stop a server started by ``start_server``: its process group, by its id."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)


# In the page: the runs table's run-name links, as (text, x, y) of their centres.
RUN_LINKS = r"""
(() => [...document.querySelectorAll('a[href*="/runs/"]')]
  .filter(a => /\/runs\/[0-9a-f]{32}$/.test(a.getAttribute('href') || ''))
  .map(a => { const r = a.getBoundingClientRect();
              return [a.innerText.trim(), r.x + r.width / 2, r.y + r.height / 2]; })
  .filter(t => t[0] && t[2] > 0))()
"""
# The run page: its breadcrumb's texts, its tabs, the stored view.
RUN_PAGE = r"""
(() => ({
  url: location.href,
  breadcrumb: [...document.querySelectorAll('nav a, [class*="breadcrumb"] a')]
    .map(a => a.innerText.trim()).filter(Boolean),
  tabs: [...document.querySelectorAll('[role="tab"]')].map(t => t.innerText.trim()),
  stored_view: localStorage.getItem('mlflow.workflowType_v1'),
}))()
"""


def click_tab(browser: Chromium, name: str) -> None:
    at = browser.wait(
        "(() => { const t = [...document.querySelectorAll('[role=\"tab\"]')]"
        f".find(t => t.innerText.trim() === {json.dumps(name)}); if (!t) return null;"
        " const r = t.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()",
        f"the tab {name!r}",
    )
    browser.click(*at)


def capture(
    uri: str,
    out: Path,
    *,
    plain: bool = False,
    run_contains: str = "",
    size: tuple[int, int] = (1400, 860),
    chromium: str | None = None,
) -> dict[str, Any]:
    """Screenshots and what the run page showed (``view.json``), see the module docstring."""
    binary = chromium or shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        raise RuntimeError("no chromium on PATH (Debian: apt-get install chromium)")
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="lpdt-chromium-") as profile:
        server, url = start_server(uri, port, plain, out / "server.log")
        chromium_log = (out / "chromium.log").open("w")
        browser = None
        try:
            browser = Chromium(binary, Path(profile), size, chromium_log)
            result: dict[str, Any] = {"table_url": url, "plain_mlflow": plain}
            result["stored_before"] = browser.eval("localStorage.length")  # about:blank
            browser.page("Page.navigate", url=url)
            links = browser.wait(RUN_LINKS, "the run links of the runs table")
            time.sleep(2)  # the table's remaining columns
            links = browser.eval(RUN_LINKS)
            browser.screenshot(out / "mlflow-table.png")
            result["run_names"] = [t[0] for t in links]
            pick = [t for t in links if run_contains in t[0]] or links
            name, x, y = pick[0]
            result["clicked"] = name
            browser.click(x, y)
            browser.wait(
                r"/\/runs\/[0-9a-f]{32}/.test(location.hash) && "
                "document.querySelectorAll('[role=\"tab\"]').length > 0",
                "the run page",
            )
            time.sleep(3)
            result["run_page"] = browser.eval(RUN_PAGE)
            browser.screenshot(out / "mlflow-run.png")
            for tab, file in (
                ("Model metrics", "mlflow-metrics.png"),
                ("System metrics", "mlflow-sys.png"),
            ):
                if tab not in result["run_page"]["tabs"]:
                    continue
                click_tab(browser, tab)
                time.sleep(4)  # the charts
                browser.screenshot(out / file)
        finally:
            if browser is not None:
                browser.close()
            stop(server)
            chromium_log.close()
    (out / "view.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--uri", default="sqlite:///results/mlflow.db")
    p.add_argument("--out", type=Path, default=Path("shots"))
    p.add_argument("--plain", action="store_true", help="MLflow's own app (for contrast)")
    p.add_argument("--run", default="", help="click the first run whose name contains this")
    p.add_argument("--width", type=int, default=1400)
    p.add_argument("--height", type=int, default=860)
    args = p.parse_args()
    result = capture(
        args.uri, args.out, plain=args.plain, run_contains=args.run, size=(args.width, args.height)
    )
    print(json.dumps(result["run_page"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
