#!/usr/bin/env python3
"""A Shoal worker in Python, standard library only.

Two ways to run beside the shoal-worker sidecar:

* HTTP mode (default): follows the member's slice on the sidecar's local JSON API
  (worker/openapi.yaml), keeps one "job runner" per owned job, and acknowledges each
  slice once it follows it. Run the sidecar without --ack-on-apply, so that the
  controller grants a job elsewhere only after this process has let go of it.

      SHOAL_API=http://127.0.0.1:8765 python3 worker.py

* Exec mode: the sidecar starts one process per job (`--exec 'exec python3 worker.py'`)
  with SHOAL_JOB and SHOAL_MEMBER set, stops it with SIGTERM when the job moves, and
  acknowledges by itself.

Each line it prints is `<member> start|stop|ack ...`, so a test (or a person) can
follow which member runs what.
"""

import json
import os
import signal
import sys
import time
import urllib.error
import urllib.request

API = os.environ.get("SHOAL_API", "http://127.0.0.1:8765").rstrip("/")
LONG_POLL_SECONDS = 30


def log(text):
    # One write per line: the processes of one member share one output file, and
    # print() may write the text and its newline separately, so two processes
    # stopping at once could interleave their lines.
    os.write(sys.stdout.fileno(), f"{text}\n".encode())


def run_one_job(job, member):
    """Exec mode: this process is the job; run until the sidecar stops it."""
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    log(f"{member} start {job}")
    while not stopping:
        time.sleep(0.1)  # the real work for `job` goes here
    log(f"{member} stop {job}")
    return 0


def get_slice(held):
    """The slice; with `held` (a slice hash), once the delivered one is another
    (or the long poll ends). An instance change keeps the revision and changes
    the hash, so the hash, not the revision, says whether anything changed."""
    path = "/v1/slice"
    if held is not None:
        path += f"?waitForChangeFrom={held}&timeoutSeconds={LONG_POLL_SECONDS}"
    try:
        with urllib.request.urlopen(API + path, timeout=LONG_POLL_SECONDS + 10) as reply:
            return json.load(reply)
    except urllib.error.HTTPError as error:
        if error.code == 404:  # no slice delivered yet
            return None
        raise


def acknowledge(revision, slice_hash):
    """"acked"; or "not needed" (409: the sidecar acknowledges by itself, or a
    newer slice came, which the next poll brings); or None to try again (503:
    fenced)."""
    body = json.dumps({"revision": revision, "hash": slice_hash}).encode()
    request = urllib.request.Request(
        API + "/v1/ack", data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10):
            return "acked"
    except urllib.error.HTTPError as error:
        reason = error.read().decode()
        if error.code == 409:
            log(f"ack of revision {revision} not needed: {error.code} {reason}")
            return "not needed"
        log(f"ack of revision {revision} refused: {error.code} {reason}")
        time.sleep(0.5)
        return None


def follow_slices():
    """HTTP mode: run exactly the jobs of the delivered slice, acknowledge each
    slice once, by revision and hash."""
    running = set()
    handled = None  # hash of the last slice followed and acknowledged
    member = "?"
    while True:
        try:
            current = get_slice(handled)
        except (urllib.error.URLError, OSError) as error:
            log(f"the sidecar is not reachable yet ({error}); retrying")
            time.sleep(1)
            continue
        if current is None:
            time.sleep(0.5)
            continue
        member = current["member"]
        wanted = set() if current["fenced"] else set(current["jobs"])
        # Stop first, then start: a job leaves this member before the ack lets it go elsewhere.
        for job in sorted(running - wanted):
            log(f"{member} stop {job}")
        for job in sorted(wanted - running):
            log(f"{member} start {job}")
        running = wanted
        if current["fenced"]:
            time.sleep(0.5)
            continue
        if current["hash"] == handled:
            continue
        outcome = acknowledge(current["revision"], current["hash"])
        if outcome is not None:
            handled = current["hash"]
        if outcome == "acked":
            log(f"{member} ack {current['revision']} {' '.join(sorted(running))}")


def main():
    job = os.environ.get("SHOAL_JOB")
    if job:
        return run_one_job(job, os.environ.get("SHOAL_MEMBER", "?"))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    follow_slices()
    return 0


if __name__ == "__main__":
    sys.exit(main())
