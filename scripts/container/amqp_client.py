#!/usr/bin/env python3
"""A small AMQP client for scripts/container-test.sh: what an external system
and an operator do against the broker, with python `pika`.

  amqp_client.py book URL --room R --date D --start HH:MM --end HH:MM
        [--reply direct|queue] [--user-id USER] [--message-id ID]
      Publishes booking.create to booking.commands (mandatory, confirmed) with
      reply_to = direct reply-to or an exclusive queue `<user>.replies.<uuid>`,
      waits for the one reply and prints it (JSON). Exit 0 when ok:true.
      (The reply queue is named after the login user, not --user-id.)
  amqp_client.py refused URL --exchange X --routing-key K [--user-id U] [--expect-code N] [--size BYTES]
      Publishes `{}` (or a JSON body of BYTES bytes) to X and expects the broker to refuse it with code N
      (default 403 ACCESS_REFUSED; a foreign user_id gives 406
      PRECONDITION_FAILED). Exit 0 when refused so, 1 otherwise.
  amqp_client.py watch URL --queue Q --key K [--key K...] [--queue-type classic|quorum]
      Declares Q (durable, auto-delete off; classic unless told) and binds
      it to booking.events with the keys (operator's event tap).
  amqp_client.py wait-event URL --queue Q --type T [--booking-id ID] [--field K=V...]
        [--booked HH:MM-HH:MM] [--timeout S] [--then-none-for S]
      Reads Q until an event of type T (about booking ID, with top-level
      fields K=V, whose `avail` does not offer the booked range) arrives;
      prints it. --then-none-for: keeps reading that long and fails if a
      second such event arrives.
  amqp_client.py delete-queue URL --queue Q
  amqp_client.py denied URL --op OP --name N [--expect-code N]
      Tries one operation the login user must not be allowed and expects the
      broker to close the channel with code N (default 403 ACCESS_REFUSED).
      OP: get (basic.get from queue N), consume (basic.consume on N),
      declare-exchange (active declare of the direct exchange N),
      delete-exchange (N), declare-queue (N). Exit 0 when refused so.
  amqp_client.py declare-queue URL --queue Q
      Declares a durable classic queue Q (an inbox another user then tries).
  amqp_client.py command URL --type T --body JSON [--user-id U]
        [--message-id ID] [--reply direct|queue|none] [--reply-to Q]
        [--timeout S] [--expect-ok | --expect-code N] [--absent TEXT...]
      Publishes command T to booking.commands with the body (user_id,
      message_id as given), waits for its reply (direct reply-to, or an
      exclusive `<login>.replies.<uuid>` queue) and prints it. --reply-to Q
      sets reply_to to Q verbatim and does not wait (--reply none: no
      reply_to). Exit 0 when the reply is ok:true (--expect-ok) or an
      error with code N (--expect-code) and contains none of the --absent
      texts.
  amqp_client.py find URL --queue Q --message-id ID [--timeout S]
      basic.get from Q without acking (everything is requeued when the
      connection closes) until a message with that message_id shows up.

URL may list several brokers separated by commas (the nodes of a cluster,
each a full amqp:// URL): they are tried in turn.

amqps:// URLs use TLS as the set's own programs do, from the environment:
AMQP_CA_FILE (the broker's CA; else the system's), AMQP_CERT_FILE and
AMQP_KEY_FILE (a client certificate), AMQP_AUTH_MECHANISM=EXTERNAL (log in
as the certificate's common name; no password sent). The broker's host name
is checked against its certificate.
"""
import argparse
import json
import os
import ssl
import sys
import time
import uuid

import pika
import pika.exceptions


def connect(url):
    all_params = []
    for one in url.split(","):
        params = pika.URLParameters(one)
        if one.lower().startswith("amqps://"):
            context = ssl.create_default_context(cafile=os.environ.get("AMQP_CA_FILE") or None)
            if os.environ.get("AMQP_CERT_FILE"):
                context.load_cert_chain(os.environ["AMQP_CERT_FILE"], os.environ.get("AMQP_KEY_FILE") or None)
            params.ssl_options = pika.SSLOptions(context, server_hostname=params.host)
            if os.environ.get("AMQP_AUTH_MECHANISM", "").upper() == "EXTERNAL":
                params.credentials = pika.credentials.ExternalCredentials()
        params.connection_attempts = 5
        params.retry_delay = 2
        params.blocked_connection_timeout = 30
        all_params.append(params)
    return pika.BlockingConnection(all_params if len(all_params) > 1 else all_params[0])


def user_of(url):
    return pika.URLParameters(url.split(",")[0]).credentials.username


def cmd_book(a):
    conn = connect(a.url)
    ch = conn.channel()
    ch.confirm_delivery()
    user = user_of(a.url)
    if a.reply == "direct":
        reply_to = "amq.rabbitmq.reply-to"
    else:
        reply_to = f"{user}.replies.{uuid.uuid4()}"
        ch.queue_declare(reply_to, exclusive=True, auto_delete=True,
                         arguments={"x-queue-type": "classic"})
    replies = []
    ch.basic_consume(reply_to, lambda c, m, p, b: replies.append((p, b)), auto_ack=True)
    body = {"room": a.room, "date": a.date, "start": a.start, "end": a.end,
            "title": a.title,
            "attendees": [{"name": "Ada Lovelace", "email": "ada@example.com", "phone": "0170 1234567"}]}
    message_id = a.message_id or str(uuid.uuid4())
    props = pika.BasicProperties(
        content_type="application/json", delivery_mode=2, type="booking.create",
        message_id=message_id, correlation_id=message_id, reply_to=reply_to,
        timestamp=int(time.time()), user_id=a.user_id)
    ch.basic_publish("booking.commands", "booking.create", json.dumps(body).encode(), props, mandatory=True)
    deadline = time.time() + a.timeout
    while not replies and time.time() < deadline:
        conn.process_data_events(time_limit=0.5)
    conn.close()
    if not replies:
        print(f"no reply within {a.timeout:.0f} s", file=sys.stderr)
        return 1
    props, raw = replies[0]
    if props.correlation_id != message_id:
        print(f"reply correlation_id {props.correlation_id!r} != {message_id!r}", file=sys.stderr)
        return 1
    reply = json.loads(raw)
    print(json.dumps(reply))
    return 0 if reply.get("ok") is True else 1


def cmd_refused(a):
    conn = connect(a.url)
    ch = conn.channel()
    ch.confirm_delivery()
    try:
        body = b"{}" if not a.size else b'{"x":"' + b"x" * (a.size - 8) + b'"}'
        ch.basic_publish(a.exchange, a.routing_key, body,
                         pika.BasicProperties(content_type="application/json", user_id=a.user_id))
        # Confirmed: the broker accepted it.
        print(f"publish to {a.exchange!r} was accepted", file=sys.stderr)
        return 1
    except pika.exceptions.ChannelClosedByBroker as e:
        print(f"refused: {e.reply_code} {e.reply_text}")
        return 0 if e.reply_code == a.expect_code else 1
    finally:
        if conn.is_open:
            conn.close()


def cmd_denied(a):
    conn = connect(a.url)
    ch = conn.channel()
    try:
        if a.op == "get":
            ch.basic_get(a.name, auto_ack=False)
        elif a.op == "consume":
            ch.basic_consume(a.name, lambda *args: None)
        elif a.op == "declare-exchange":
            ch.exchange_declare(a.name, "direct", durable=True)
        elif a.op == "delete-exchange":
            ch.exchange_delete(a.name)
        elif a.op == "declare-queue":
            ch.queue_declare(a.name, durable=True, arguments={"x-queue-type": "classic"})
        print(f"{a.op} {a.name!r} was allowed", file=sys.stderr)
        return 1
    except pika.exceptions.ChannelClosedByBroker as e:
        print(f"refused: {e.reply_code} {e.reply_text}")
        return 0 if e.reply_code == a.expect_code else 1
    finally:
        if conn.is_open:
            conn.close()


def cmd_declare_queue(a):
    conn = connect(a.url)
    conn.channel().queue_declare(a.queue, durable=True, arguments={"x-queue-type": "classic"})
    conn.close()
    return 0


def cmd_command(a):
    conn = connect(a.url)
    ch = conn.channel()
    ch.confirm_delivery()
    replies = []
    wait = a.reply_to is None and a.reply != "none"
    if a.reply_to is not None:
        reply_to = a.reply_to
    elif a.reply == "none":
        reply_to = None
    elif a.reply == "direct":
        reply_to = "amq.rabbitmq.reply-to"
    else:
        reply_to = f"{user_of(a.url)}.replies.{uuid.uuid4()}"
        ch.queue_declare(reply_to, exclusive=True, auto_delete=True, arguments={"x-queue-type": "classic"})
    if wait:
        ch.basic_consume(reply_to, lambda c, m, p, b: replies.append((p, b)), auto_ack=True)
    message_id = a.message_id or str(uuid.uuid4())
    props = pika.BasicProperties(
        content_type="application/json", delivery_mode=2, type=a.type, message_id=message_id,
        correlation_id=message_id, reply_to=reply_to, timestamp=int(time.time()), user_id=a.user_id)
    ch.basic_publish("booking.commands", a.type, a.body.encode(), props, mandatory=True)
    if not wait:
        conn.close()
        print(f"published {a.type} {message_id} with reply_to {reply_to!r}")
        return 0
    deadline = time.time() + a.timeout
    while not replies and time.time() < deadline:
        conn.process_data_events(time_limit=0.5)
    conn.close()
    if not replies:
        print(f"no reply within {a.timeout:.0f} s", file=sys.stderr)
        return 1
    raw = replies[0][1].decode("utf-8", "replace")
    print(raw)
    try:
        reply = json.loads(raw)
    except ValueError:
        print("reply is not JSON", file=sys.stderr)
        return 1
    for text in a.absent:
        if text in raw:
            print(f"reply contains {text!r}", file=sys.stderr)
            return 1
    if a.expect_code is not None:
        code = (reply.get("error") or {}).get("code") if isinstance(reply, dict) else None
        if reply.get("ok") is not False or code != a.expect_code:
            print(f"expected ok:false with code {a.expect_code}", file=sys.stderr)
            return 1
        return 0
    return 0 if reply.get("ok") is True else 1


def cmd_find(a):
    deadline = time.time() + a.timeout
    while True:
        # Each round on a new connection: closing it requeues what was got.
        conn = connect(a.url)
        ch = conn.channel()
        seen = 0
        try:
            while True:
                method, props, _ = ch.basic_get(a.queue, auto_ack=False)
                if method is None:
                    break
                seen += 1
                if props.message_id == a.message_id:
                    print(json.dumps({"queue": a.queue, "message_id": props.message_id,
                                      "headers": {k: str(v) for k, v in (props.headers or {}).items()}}))
                    return 0
        finally:
            if conn.is_open:
                conn.close()
        if time.time() >= deadline:
            print(f"no message {a.message_id} in {a.queue} within {a.timeout:.0f} s ({seen} other messages)",
                  file=sys.stderr)
            return 1
        time.sleep(1)


def cmd_watch(a):
    conn = connect(a.url)
    ch = conn.channel()
    ch.queue_declare(a.queue, durable=True, arguments={"x-queue-type": a.queue_type})
    for key in a.key:
        ch.queue_bind(a.queue, a.exchange, key)
    conn.close()
    return 0


def event_booking_id(body):
    for path in (("booking", "id"), ("bookingId",)):
        node = body
        for k in path:
            node = node.get(k) if isinstance(node, dict) else None
        if isinstance(node, str):
            return node
    return None


def minutes(hhmm):
    h, m = hhmm.strip().split(":")
    return int(h) * 60 + int(m)


def overlaps(free_range, booked):
    """Does a free range "HH:MM - HH:MM" overlap the booked "HH:MM-HH:MM"?"""
    a, b = (minutes(x) for x in free_range.split("-"))
    s, e = (minutes(x) for x in booked.split("-"))
    return a < e and s < b


def cmd_wait_event(a):
    conn = connect(a.url)
    ch = conn.channel()
    deadline = time.time() + a.timeout
    seen = []
    while time.time() < deadline:
        method, props, raw = ch.basic_get(a.queue, auto_ack=True)
        if method is None:
            time.sleep(0.5)
            continue
        etype = props.type or method.routing_key
        try:
            body = json.loads(raw)
        except ValueError:
            continue
        seen.append(etype)
        fields_match = all(isinstance(body, dict) and str(body.get(k)) == v
                           for k, v in (f.split("=", 1) for f in a.field))
        booked_ok = a.booked is None or (
            isinstance(body, dict) and isinstance(body.get("avail"), list)
            and not any(overlaps(r, a.booked) for r in body["avail"]))
        if etype == a.type and fields_match and booked_ok and (a.booking_id is None or event_booking_id(body) == a.booking_id):
            print(json.dumps(body))
            text = raw.decode("utf-8", "replace")
            for absent in a.absent:
                if absent in text:
                    conn.close()
                    print(f"event contains {absent!r}", file=sys.stderr)
                    return 1
            quiet_until = time.time() + a.then_none_for
            while time.time() < quiet_until:
                method, props, raw = ch.basic_get(a.queue, auto_ack=True)
                if method is None:
                    time.sleep(0.5)
                    continue
                try:
                    again = json.loads(raw)
                except ValueError:
                    continue
                if (props.type or method.routing_key) == a.type and (a.booking_id is None or event_booking_id(again) == a.booking_id):
                    conn.close()
                    print(f"a second {a.type} event: {raw.decode('utf-8', 'replace')}", file=sys.stderr)
                    return 1
            conn.close()
            return 0
    conn.close()
    what = " ".join([a.type] + ([f"bookingId={a.booking_id}"] if a.booking_id else []) + a.field
                    + ([f"avail without {a.booked}"] if a.booked else []))
    print(f"no event {what} within {a.timeout:.0f} s (saw: {', '.join(seen) or 'nothing'})", file=sys.stderr)
    return 1


def cmd_delete_queue(a):
    conn = connect(a.url)
    conn.channel().queue_delete(a.queue)
    conn.close()
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("book")
    b.add_argument("url")
    b.add_argument("--room", required=True)
    b.add_argument("--date", required=True)
    b.add_argument("--start", required=True)
    b.add_argument("--end", required=True)
    b.add_argument("--title", default="container test")
    b.add_argument("--reply", choices=["direct", "queue"], default="queue")
    b.add_argument("--user-id")
    b.add_argument("--message-id")
    b.add_argument("--timeout", type=float, default=30)
    r = sub.add_parser("refused")
    r.add_argument("url")
    r.add_argument("--exchange", required=True)
    r.add_argument("--routing-key", required=True)
    r.add_argument("--user-id")
    r.add_argument("--expect-code", type=int, default=403, help="403 ACCESS_REFUSED, 406 PRECONDITION_FAILED")
    r.add_argument("--size", type=int, default=0, help="body of this many bytes instead of {}")
    w = sub.add_parser("watch")
    w.add_argument("url")
    w.add_argument("--queue", required=True)
    w.add_argument("--key", action="append", required=True)
    w.add_argument("--exchange", default="booking.events")
    w.add_argument("--queue-type", choices=["classic", "quorum"], default="classic")
    e = sub.add_parser("wait-event")
    e.add_argument("url")
    e.add_argument("--queue", required=True)
    e.add_argument("--type", required=True)
    e.add_argument("--booking-id")
    e.add_argument("--field", action="append", default=[], help="KEY=VALUE a top-level field must have")
    e.add_argument("--booked", help="HH:MM-HH:MM that the event's avail list must not offer")
    e.add_argument("--timeout", type=float, default=60)
    e.add_argument("--absent", action="append", default=[], help="text the matching event must not contain")
    e.add_argument("--then-none-for", type=float, default=0, help="seconds to keep reading; fail on a second such event")
    dn = sub.add_parser("denied")
    dn.add_argument("url")
    dn.add_argument("--op", required=True, choices=["get", "consume", "declare-exchange", "delete-exchange", "declare-queue"])
    dn.add_argument("--name", required=True)
    dn.add_argument("--expect-code", type=int, default=403)
    dq = sub.add_parser("declare-queue")
    dq.add_argument("url")
    dq.add_argument("--queue", required=True)
    c = sub.add_parser("command")
    c.add_argument("url")
    c.add_argument("--type", required=True)
    c.add_argument("--body", required=True)
    c.add_argument("--user-id")
    c.add_argument("--message-id")
    c.add_argument("--reply", choices=["direct", "queue", "none"], default="direct")
    c.add_argument("--reply-to")
    c.add_argument("--timeout", type=float, default=30)
    c.add_argument("--expect-ok", action="store_true")
    c.add_argument("--expect-code", type=int)
    c.add_argument("--absent", action="append", default=[])
    f = sub.add_parser("find")
    f.add_argument("url")
    f.add_argument("--queue", required=True)
    f.add_argument("--message-id", required=True)
    f.add_argument("--timeout", type=float, default=30)
    d = sub.add_parser("delete-queue")
    d.add_argument("url")
    d.add_argument("--queue", required=True)
    a = p.parse_args()
    try:
        return {"book": cmd_book, "refused": cmd_refused, "watch": cmd_watch,
                "wait-event": cmd_wait_event, "delete-queue": cmd_delete_queue, "denied": cmd_denied,
                "declare-queue": cmd_declare_queue, "command": cmd_command, "find": cmd_find}[a.cmd](a)
    except pika.exceptions.AMQPError as e:
        print(f"AMQP error: {e!r}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
