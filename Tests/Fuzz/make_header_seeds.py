#!/usr/bin/env python3
"""Writes the seed corpus of the header-decoder fuzz target:
Tests/Fuzz/corpus/header-decoder/*.bin, each an AMQP basic-properties
payload (property flags, then the present properties) as rabbitmq-c's
amqp_decode_properties reads it. Run it again after changing it; the
files are committed."""
import os
import struct
import sys

sys.setrecursionlimit(20000)  # the deepest seed nests 800 arrays

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "header-decoder")


def shortstr(s):
    b = s.encode()
    return bytes([len(b)]) + b


def longstr(b):
    return struct.pack(">I", len(b)) + b


def value(v):
    kind, x = v
    if kind == "S":
        return b"S" + longstr(x.encode() if isinstance(x, str) else x)
    if kind == "x":
        return b"x" + longstr(x)
    if kind == "t":
        return b"t" + bytes([1 if x else 0])
    if kind == "b":
        return b"b" + struct.pack(">b", x)
    if kind == "B":
        return b"B" + struct.pack(">B", x)
    if kind == "s":
        return b"s" + struct.pack(">h", x)
    if kind == "u":
        return b"u" + struct.pack(">H", x)
    if kind == "I":
        return b"I" + struct.pack(">i", x)
    if kind == "i":
        return b"i" + struct.pack(">I", x)
    if kind == "l":
        return b"l" + struct.pack(">q", x)
    if kind == "L":
        return b"L" + struct.pack(">Q", x)
    if kind == "f":
        return b"f" + struct.pack(">f", x)
    if kind == "d":
        return b"d" + struct.pack(">d", x)
    if kind == "D":
        return b"D" + struct.pack(">BI", *x)
    if kind == "T":
        return b"T" + struct.pack(">Q", x)
    if kind == "V":
        return b"V"
    if kind == "F":
        return b"F" + table(x)
    if kind == "A":
        return b"A" + longstr(b"".join(value(i) for i in x))
    raise ValueError(kind)


def table(entries):
    body = b"".join(shortstr(k) + value(v) for k, v in entries)
    return struct.pack(">I", len(body)) + body


def properties(content_type=None, headers=None, delivery_mode=None, message_id=None, type_=None,
               correlation_id=None, reply_to=None, user_id=None, timestamp=None, raw_headers=None):
    flags, out = 0, b""
    if content_type is not None:
        flags |= 0x8000
        out += shortstr(content_type)
    if headers is not None or raw_headers is not None:
        flags |= 0x2000
        out += raw_headers if raw_headers is not None else table(headers)
    if delivery_mode is not None:
        flags |= 0x1000
        out += bytes([delivery_mode])
    if correlation_id is not None:
        flags |= 0x0400
        out += shortstr(correlation_id)
    if reply_to is not None:
        flags |= 0x0200
        out += shortstr(reply_to)
    if message_id is not None:
        flags |= 0x0080
        out += shortstr(message_id)
    if timestamp is not None:
        flags |= 0x0040
        out += struct.pack(">Q", timestamp)
    if type_ is not None:
        flags |= 0x0020
        out += shortstr(type_)
    if user_id is not None:
        flags |= 0x0010
        out += shortstr(user_id)
    return struct.pack(">H", flags) + out


def x_death(reason, count):
    return ("F", [("count", ("l", count)), ("reason", ("S", reason)), ("queue", ("S", "booking-handler.commands")),
                  ("time", ("T", 1700000000)), ("exchange", ("S", "booking.commands")),
                  ("routing-keys", ("A", [("S", "booking.create")]))])


def nested_tables(depth):
    v = ("F", [])
    for _ in range(depth - 1):
        v = ("F", [("n", v)])
    return v


def nested_arrays(depth):
    v = ("A", [])
    for _ in range(depth - 1):
        v = ("A", [v])
    return v


def mixed(depth):
    v = ("V", None)
    for i in range(depth):
        v = ("A", [v]) if i % 2 else ("F", [("k", v)])
    return v


seeds = {
    "empty": properties(),
    "json-command": properties(content_type="application/json", delivery_mode=2, message_id="m-1",
                               type_="booking.create", reply_to="amq.rabbitmq.reply-to", user_id="guest",
                               timestamp=1700000000),
    "idempotency-key": properties(content_type="application/json", headers=[("idempotency-key", ("S", "k-1"))]),
    "x-death-one": properties(headers=[("x-death", ("A", [x_death("rejected", 1)])),
                                       ("x-first-death-reason", ("S", "rejected")),
                                       ("x-first-death-queue", ("S", "booking-handler.commands"))]),
    "x-death-two": properties(headers=[("x-death", ("A", [x_death("rejected", 3), x_death("expired", 1)])),
                                       ("x-delivery-count", ("l", 4))], message_id="m-2"),
    "every-kind": properties(headers=[
        ("t", ("t", True)), ("b", ("b", -128)), ("B", ("B", 255)), ("s", ("s", -32768)), ("u", ("u", 65535)),
        ("I", ("I", -2**31)), ("i", ("i", 2**32 - 1)), ("l", ("l", -2**63)), ("L", ("L", 2**64 - 1)),
        ("f", ("f", -3.25)), ("d", ("d", 2.5)), ("D", ("D", (2, 12345))), ("S", ("S", "Grüße 東京")),
        ("x", ("x", b"\xff\xfe\x00")), ("T", ("T", 1700000000)), ("V", ("V", None)), ("F", ("F", [])),
        ("A", ("A", [])), ("ключ", ("S", "non-ASCII key"))]),
    "retry-headers": properties(headers=[("x-attempt", ("I", 2)), ("x-pass-attendee", ("I", 0)),
                                         ("x-death-reason", ("S", "1100 title is invalid"))]),
    "nested-at-limit": properties(headers=[("n", nested_tables(15))]),
    "nested-over-limit": properties(headers=[("n", nested_tables(17))]),
    "arrays-64": properties(headers=[("n", nested_arrays(64))]),
    "tables-100": properties(headers=[("n", nested_tables(100))]),
    "mixed-200": properties(headers=[("n", mixed(200))]),
    # As deep as 4 KiB allows: 5 bytes per array.
    "arrays-800": properties(headers=[("n", nested_arrays(800))]),
    "wide-array": properties(headers=[("w", ("A", [("V", None)] * 1000))]),
    "many-keys": properties(headers=[("k%d" % i, ("I", i)) for i in range(150)]),
    "truncated-table": properties(raw_headers=struct.pack(">I", 50) + b"\x01aS\x00\x00"),
    "bad-kind": properties(raw_headers=table([]) [:0] + struct.pack(">I", 3) + b"\x01a?"),
    "huge-length": properties(raw_headers=struct.pack(">I", 0xFFFFFFFF) + b"\x01aV"),
    "flags-continued": b"\x00\x01\x00\x00",
}

os.makedirs(OUT, exist_ok=True)
for name, payload in seeds.items():
    assert len(payload) <= 4096, (name, len(payload))
    with open(os.path.join(OUT, name + ".bin"), "wb") as f:
        f.write(payload)
print("wrote %d seeds to %s" % (len(seeds), OUT))
