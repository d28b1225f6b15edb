"""A small Chrome DevTools Protocol client over `--remote-debugging-pipe`, for the tests.

Why its own client rather than playwright or selenium: the browser is Debian's `chromium`
package (the machine cannot download a browser build), and the pipe transport needs no
port, no WebSocket library and no driver whose version must match the browser's: Chromium
reads NUL-terminated JSON commands on fd 3 and writes replies and events on fd 4. The few
commands used here (targets, navigation, `Runtime.evaluate`, mouse and keyboard input,
screenshots) have been stable in CDP for years.

`ensure_chromium()` installs the package with apt-get when it is missing (the tests run as
root on Debian 12) and says why it could not, so a test can skip with that reason.
`Chromium` starts its own process group and ends it by that PID (first `Browser.close`).
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
# Needed on this machine: root (no sandbox), no GPU, a closed network (nothing in the
# background may try to reach out), a fresh profile per start.
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--no-default-browser-check", "--mute-audio",
    "--hide-scrollbars", "--remote-debugging-pipe",
)


STARTUP_S = 120  # for Chromium to start and answer its first command


class CDPError(RuntimeError):
    """A CDP command failed, timed out, or the browser went away."""


def ensure_chromium(timeout_s: float = 600) -> str | None:
    """The path of a usable Chromium, installing Debian's package when missing.

    Returns None when it is there; else the reason it cannot be had (for a loud skip)."""
    if os.access(CHROMIUM, os.X_OK):
        return None
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return f"{CHROMIUM} is missing and apt-get cannot run here (needs root on Debian)"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "chromium"]):
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                                  env=env, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return f"{' '.join(cmd)} did not finish in {timeout_s:.0f} s"
        if done.returncode != 0:
            return f"{' '.join(cmd)} failed: {(done.stderr or done.stdout).strip()[-400:]}"
    return None if os.access(CHROMIUM, os.X_OK) else f"{CHROMIUM} still missing after install"


def _high_fd(fd: int) -> int:
    """fd moved to a number >= 10 (close-on-exec), so that putting the pipe ends on 3 and
    4 in the child can never overwrite one of them."""
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return high


class Chromium:
    """One headless Chromium process and its CDP pipe."""

    def __init__(self, profile_dir: Path, log_path: Path, width: int = 1400,
                 height: int = 1000) -> None:
        to_chrome_r, to_chrome_w = (_high_fd(fd) for fd in os.pipe())
        from_chrome_r, from_chrome_w = (_high_fd(fd) for fd in os.pipe())
        # bash puts the pipe ends on fds 3 and 4, closes the originals and execs Chromium
        # (no preexec_fn: it is not safe with threads)
        fds = (f"3<&{to_chrome_r} 4>&{from_chrome_w} {to_chrome_r}<&- {from_chrome_w}>&-")
        self.log = open(log_path, "wb")  # closed in close()
        self.proc = subprocess.Popen(
            ["/bin/bash", "-c", f'exec "$0" "$@" {fds}', CHROMIUM, *FLAGS,
             f"--user-data-dir={profile_dir}", f"--window-size={width},{height}",
             "about:blank"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log,
            pass_fds=(to_chrome_r, from_chrome_w), start_new_session=True)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._out, self._in = to_chrome_w, from_chrome_r
        self._buf = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        self.width, self.height = width, height
        # the first reply waits for the browser to start: a hang detector, not a measure
        # (seen: 17 s from here to Chromium's first log line in `make test` beside a busy
        # suite, which a 15 s deadline on the first command failed)
        try:
            self.send("Browser.getVersion", timeout_s=STARTUP_S)
        except CDPError:
            self.close()
            raise

    def send(self, method: str, params: dict[str, Any] | None = None,
             session_id: str | None = None, timeout_s: float = 15) -> dict[str, Any]:
        """Send one command and wait for its reply; events met meanwhile are kept."""
        self._next_id += 1
        msg: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session_id is not None:
            msg["sessionId"] = session_id
        try:
            os.write(self._out, json.dumps(msg).encode() + b"\0")
        except OSError as e:
            raise CDPError(f"{method}: the browser is gone ({e})") from e
        deadline = time.monotonic() + timeout_s
        while True:
            reply = self._read_message(deadline, method)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise CDPError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def _read_message(self, deadline: float, method: str) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CDPError(f"{method}: no reply in time")
            ready, _, _ = select.select([self._in], [], [], left)
            if ready:
                chunk = os.read(self._in, 1 << 20)
                if not chunk:
                    raise CDPError(f"{method}: the browser closed its pipe")
                self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def new_page(self) -> Page:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})
        page = Page(self, session["sessionId"])
        page.call("Page.enable")
        page.call("Emulation.setDeviceMetricsOverride", {
            "width": self.width, "height": self.height, "deviceScaleFactor": 1,
            "mobile": False})
        return page

    def close(self) -> None:
        """Browser.close, then SIGKILL to the process group started here if still up."""
        if self.proc.poll() is None:
            try:
                self.send("Browser.close", timeout_s=5)
            except CDPError:
                pass
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)
        else:  # the browser exited; end helpers of its group still around, if any
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for fd in (self._out, self._in):
            try:
                os.close(fd)
            except OSError:
                pass
        self.log.close()


class Page:
    """One tab, driven through its flat CDP session."""

    def __init__(self, browser: Chromium, session_id: str) -> None:
        self.browser = browser
        self.session_id = session_id

    def call(self, method: str, params: dict[str, Any] | None = None,
             timeout_s: float = 15) -> dict[str, Any]:
        return self.browser.send(method, params, self.session_id, timeout_s)

    def evaluate(self, expression: str, timeout_s: float = 15) -> Any:
        """The JSON value of a JavaScript expression (promises awaited); page errors raise."""
        result = self.call("Runtime.evaluate", {
            "expression": expression, "returnByValue": True, "awaitPromise": True},
            timeout_s)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise CDPError(f"page error in {expression[:80]!r}: {text}")
        return result.get("result", {}).get("value")

    def goto(self, url: str, timeout_s: float = 15) -> None:
        nav = self.call("Page.navigate", {"url": url})
        if nav.get("errorText"):
            raise CDPError(f"navigating to {url}: {nav['errorText']}")
        self.wait_for("document.readyState === 'complete'", timeout_s, what=f"load {url}")

    def wait_for(self, expression: str, timeout_s: float = 15, what: str = "",
                 interval_s: float = 0.1) -> Any:
        """Poll an expression until it is truthy; return its value or raise naming it."""
        deadline = time.monotonic() + timeout_s
        value: Any = None
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(interval_s)
        raise CDPError(f"timed out after {timeout_s} s waiting for {what or expression}"
                       f" (last value {value!r})")

    def click(self, selector_js: str, timeout_s: float = 5) -> None:
        """A real left click (mouse events) at the centre of the element an expression
        yields, scrolled into view and once it has stopped moving (animations)."""
        where = f"""(() => {{
            const e = {selector_js};
            if (!e) return null;
            e.scrollIntoView({{block: 'center'}});
            const r = e.getBoundingClientRect();
            return [r.x + r.width / 2, r.y + r.height / 2];
        }})()"""
        deadline = time.monotonic() + timeout_s
        last = None
        while True:
            now = self.evaluate(where)
            if now is not None and now == last:
                break
            if time.monotonic() > deadline:
                raise CDPError(f"nothing steady to click: {selector_js}")
            last = now
            time.sleep(0.15)
        x, y = now
        for kind, extra in (("mouseMoved", {}),
                            ("mousePressed", {"button": "left", "clickCount": 1}),
                            ("mouseReleased", {"button": "left", "clickCount": 1})):
            self.call("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, **extra})

    def type_into(self, selector_js: str, text: str) -> None:
        """Replace an input's value as a user would: focus, select all, type."""
        self.evaluate(f"""(() => {{
            const e = {selector_js};
            if (!e) throw new Error('no input: ' + {json.dumps(selector_js)});
            e.scrollIntoView({{block: 'center'}});
            e.focus();
            e.select();
        }})()""")
        self.call("Input.insertText", {"text": text})

    def screenshot(self, path: Path, full_page: bool = False) -> Path:
        """The viewport as PNG; with `full_page`, the whole page, however long."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = self.call("Page.getLayoutMetrics")["cssContentSize"]
            params.update(captureBeyondViewport=True, clip={
                "x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1})
        data = self.call("Page.captureScreenshot", params)["data"]
        path.write_bytes(base64.b64decode(data))
        return path
