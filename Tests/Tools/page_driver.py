#!/usr/bin/env python3
"""Drives a page in headless Chromium over the DevTools protocol (on a pipe,
no port, standard library only), for page tests that click.

  page_driver.py CHROMIUM URL SCRIPT_FILE [SCREENSHOT.png] [WIDTH,HEIGHT]

Opens URL, evaluates SCRIPT_FILE (a JavaScript expression whose value is a
promise of a string: the scenario, with its own waits) in the page, prints
that string, and (optionally) saves a screenshot afterwards. Exit status 0
when the script's promise resolved, 1 when it rejected or timed out (the
error is printed on stderr), 2 for bad arguments.
"""
import base64
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time


class Pipe:
    def __init__(self, to_browser, from_browser):
        self.out = to_browser
        self.inp = from_browser
        self.buffer = b""
        self.next_id = 0

    def send(self, method, params=None, session=None):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.out, json.dumps(message).encode() + b"\0")
        return self.next_id

    def call(self, method, params=None, session=None, deadline=None):
        wanted = self.send(method, params, session)
        while True:
            message = self.read(deadline)
            if message.get("id") == wanted:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    def read(self, deadline):
        while b"\0" not in self.buffer:
            if deadline and time.time() > deadline:
                raise TimeoutError("no answer from Chromium in time")
            chunk = os.read(self.inp, 1 << 16)
            if not chunk:
                raise RuntimeError("Chromium closed the pipe")
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)


def main(argv):
    if len(argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    chromium, url, script_file = argv[1], argv[2], argv[3]
    screenshot = argv[4] if len(argv) > 4 else None
    width, height = (int(v) for v in (argv[5] if len(argv) > 5 else "1280,900").split(","))
    script = open(script_file, encoding="utf-8").read()
    profile = tempfile.mkdtemp(prefix="page-driver-")
    def high(fd):
        # Above 4, so that placing the pipe on 3 and 4 in the child never
        # overwrites one of its own ends.
        moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(fd)
        return moved

    to_browser_r, to_browser_w = (high(fd) for fd in os.pipe())
    from_browser_r, from_browser_w = (high(fd) for fd in os.pipe())

    def child_fds():
        # The DevTools pipe is fds 3 (commands in) and 4 (answers out);
        # dup2 makes them inheritable, everything else is close-on-exec.
        os.dup2(to_browser_r, 3)
        os.dup2(from_browser_w, 4)

    browser = subprocess.Popen(
        [chromium, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run", "--disable-dev-shm-usage",
         f"--user-data-dir={profile}", "--remote-debugging-pipe", f"--window-size={width},{height}", "about:blank"],
        close_fds=False, preexec_fn=child_fds,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(to_browser_r)
    os.close(from_browser_w)
    pipe = Pipe(to_browser_w, from_browser_r)
    deadline = time.time() + 90
    status = 0
    try:
        target = pipe.call("Target.createTarget", {"url": "about:blank"}, deadline=deadline)["targetId"]
        session = pipe.call("Target.attachToTarget", {"targetId": target, "flatten": True}, deadline=deadline)["sessionId"]
        pipe.call("Page.enable", session=session, deadline=deadline)
        pipe.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 500},
                  session=session, deadline=deadline)
        pipe.call("Page.navigate", {"url": url}, session=session, deadline=deadline)
        # Wait for the document to exist before the scenario runs.
        while True:
            ready = pipe.call("Runtime.evaluate", {"expression": "document.readyState", "returnByValue": True},
                              session=session, deadline=deadline)
            if ready.get("result", {}).get("value") == "complete":
                break
            time.sleep(0.05)
        result = pipe.call("Runtime.evaluate", {"expression": script, "awaitPromise": True, "returnByValue": True},
                           session=session, deadline=deadline)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            print(details.get("exception", {}).get("description") or details.get("text"), file=sys.stderr)
            status = 1
        else:
            print(result.get("result", {}).get("value"))
        if screenshot:
            shot = pipe.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": False},
                             session=session, deadline=deadline)
            with open(screenshot, "wb") as f:
                f.write(base64.b64decode(shot["data"]))
    except Exception as error:  # the test prints it
        print(f"page driver: {error}", file=sys.stderr)
        status = 1
    finally:
        try:
            pipe.send("Browser.close")
        except OSError:
            pass
        try:
            browser.wait(timeout=10)
        except subprocess.TimeoutExpired:
            browser.kill()
            browser.wait()
        shutil.rmtree(profile, ignore_errors=True)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
