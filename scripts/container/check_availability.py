#!/usr/bin/env python3
"""check_availability.py URL ROOM START END TIMEOUT

Polls the projector's GET /rooms (legacy getrooms shape:
[{"name": ..., "avail": ["07:00 - 09:00", ...]}]) until ROOM's free ranges
no longer cover START-END (the booking was projected). Exit 0 then, 1 after
TIMEOUT seconds (prints the last answer)."""
import json
import sys
import time
import urllib.request


def minutes(hhmm):
    h, m = hhmm.strip().split(":")
    return int(h) * 60 + int(m)


def overlaps_free(avail, start, end):
    for r in avail:
        a, b = (minutes(x) for x in r.split("-"))
        if a < end and start < b:
            return True
    return False


def main():
    url, room, start, end, timeout = sys.argv[1:6]
    start, end, deadline = minutes(start), minutes(end), time.time() + float(timeout)
    last = "no answer"
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                last = resp.read().decode()
            rooms = json.loads(last)
            match = [r for r in rooms if isinstance(r, dict) and r.get("name") == room]
            if match and isinstance(match[0].get("avail"), list) and match[0]["avail"] \
                    and not overlaps_free(match[0]["avail"], start, end):
                print(json.dumps(match[0]["avail"]))
                return 0
        except Exception as e:  # not up yet, 404 before the projector serves /rooms, ...
            last = repr(e)
        time.sleep(1)
    print(f"{room} still free in {sys.argv[3]}-{sys.argv[4]} (or no answer): {last[:500]}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
