"""Open the built site in headless Debian ``chromium`` through the DevTools protocol and check it like a reader.

Pages: the home page, the ``adamw`` API page, the migration guide, and a search for "adamw". Each must load with no
console error or uncaught exception, every ``<img>`` must have loaded (``naturalWidth > 0``), and the search must list
the optimizers' reference page. Screenshots go to ``site/_screenshots/``. Exit status 0 when all pass, 1 otherwise.

Usage: ``python docs/_scripts/browser_check.py [site-dir]`` (``make docs-check`` builds first and runs this).
"""

from __future__ import annotations

import base64
import functools
import http.server
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import websocket

PAGES = [
    ("home", "index.html", None),
    ("adamw", "reference/optimizers/index.html#gradax.adamw", None),
    ("coming-from-optax", "coming-from-optax/index.html", None),
    ("search-adamw", "index.html", "adamw"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class Tab:
    def __init__(self, ws_url: str):
        self.ws = websocket.create_connection(ws_url, timeout=60, suppress_origin=True)
        self.next_id = 0
        self.events: list[dict] = []

    def call(self, method: str, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def drain(self, seconds: float):
        end = time.time() + seconds
        self.ws.settimeout(0.2)
        while time.time() < end:
            try:
                self.events.append(json.loads(self.ws.recv()))
            except websocket.WebSocketTimeoutException:
                pass
        self.ws.settimeout(60)

    def eval(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        return result.get("result", {}).get("value")

    def errors(self) -> list[str]:
        out = []
        for e in self.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.exceptionThrown":
                out.append("exception: " + json.dumps(p.get("exceptionDetails", {}))[:300])
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append("console.error: " + json.dumps(p.get("args", []))[:300])
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append("log: " + p["entry"].get("text", "")[:300] + " " + p["entry"].get("url", ""))
        return out


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    sys.exit("browser_check: Debian's `chromium` is not installed; `apt-get install -y chromium` (as root).")


def main() -> int:
    site = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "site").resolve()
    if not (site / "index.html").exists():
        sys.exit(f"browser_check: {site}/index.html not found; run `make docs` first.")
    shots = site / "_screenshots"
    shots.mkdir(exist_ok=True)
    port = _free_port()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), functools.partial(_Quiet, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{port}/"
    debug_port = _free_port()
    profile = tempfile.mkdtemp(prefix="gradax-chromium-")
    args = [
        _chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        f"--remote-debugging-port={debug_port}",
        "--remote-allow-origins=*",
        "--window-size=1280,900",
        "about:blank",
    ]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    failures: list[str] = []
    try:
        targets = None
        for _ in range(100):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{debug_port}/json/list", timeout=2) as r:
                    targets = [t for t in json.load(r) if t.get("type") == "page"]
                if targets:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        if not targets:
            raise RuntimeError("chromium did not open its DevTools port")
        tab = Tab(targets[0]["webSocketDebuggerUrl"])
        for domain in ("Page", "Runtime", "Log"):
            tab.call(f"{domain}.enable")
        for name, path, query in PAGES:
            tab.events.clear()
            tab.call("Page.navigate", url=base + path)
            for _ in range(100):
                if tab.eval("document.readyState") == "complete":
                    break
                time.sleep(0.1)
            tab.drain(1.0)
            problems: list[str] = []
            images = tab.eval(
                "Promise.all([...document.images].map(i => i.complete ? i : new Promise(r => {i.onload = i.onerror ="
                " () => r(i)}))).then(imgs => imgs.map(i => [i.currentSrc, i.naturalWidth]))"
            )
            broken = [src for src, width in images or [] if not width]
            if broken:
                problems.append(f"images that did not load: {broken}")
            if not tab.eval("document.title"):
                problems.append("the page has no title")
            if name == "adamw" and not tab.eval("!!document.getElementById('gradax.adamw')"):
                problems.append("no element with id gradax.adamw (the API entry is missing)")
            detail = f"{len(images or [])} images"
            if query:
                tab.eval(
                    "document.querySelector('label[for=__search]') && document.querySelector('label[for=__search]')"
                    ".click(); true"
                )
                tab.eval(
                    "(() => {const i = document.querySelector('input[data-md-component=search-query]');"
                    f" i.focus(); i.value = {json.dumps(query)}; i.dispatchEvent(new Event('input', {{bubbles: true}}));"
                    " i.dispatchEvent(new KeyboardEvent('keyup', {bubbles: true})); return true})()"
                )
                hits: list[str] = []
                for _ in range(100):
                    hits = (
                        tab.eval("[...document.querySelectorAll('.md-search-result__item a')].map(a => a.href)") or []
                    )
                    if hits:
                        break
                    time.sleep(0.1)
                tab.drain(0.5)
                if not any("reference/optimizers/" in h for h in hits):
                    problems.append(f"the search for {query!r} did not find reference/optimizers/: {hits[:5]}")
                detail += f", {len(hits)} search results"
            problems = tab.errors() + problems
            shot = tab.call("Page.captureScreenshot", format="png")
            (shots / f"{name}.png").write_bytes(base64.b64decode(shot["data"]))
            status = "ok" if not problems else "FAIL"
            print(f"browser_check: {name:<18} {status:<4} ({detail}) -> _screenshots/{name}.png")
            failures += [f"{name}: {p}" for p in problems]
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        server.shutdown()
        shutil.rmtree(profile, ignore_errors=True)
    for f in failures:
        print("browser_check: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    os.environ.setdefault("NO_AT_BRIDGE", "1")
    sys.exit(main())
