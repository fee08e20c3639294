#!/usr/bin/env python3
"""A small AMQP client for scripts/container-test.sh: what an external system
and an operator do against the broker, with python `pika`.

  amqp_client.py book URL --room R --date D --start HH:MM --end HH:MM
        [--reply direct|queue] [--user-id USER] [--message-id ID]
      Publishes booking.create to booking.commands (mandatory, confirmed) with
      reply_to = direct reply-to or an exclusive queue `<user>.replies.<uuid>`,
      waits for the one reply and prints it (JSON). Exit 0 when ok:true.
      (The reply queue is named after the login user, not --user-id.)
  amqp_client.py refused URL --exchange X --routing-key K [--user-id U] [--expect-code N]
      Publishes `{}` to X and expects the broker to refuse it with code N
      (default 403 ACCESS_REFUSED; a foreign user_id gives 406
      PRECONDITION_FAILED). Exit 0 when refused so, 1 otherwise.
  amqp_client.py watch URL --queue Q --key K [--key K...]
      Declares Q (classic, durable, auto-delete off) and binds it to
      booking.events with the keys (operator's event tap).
  amqp_client.py wait-event URL --queue Q --type T [--booking-id ID] [--field K=V...]
        [--booked HH:MM-HH:MM] [--timeout S]
      Reads Q until an event of type T (about booking ID, with top-level
      fields K=V, whose `avail` does not offer the booked range) arrives;
      prints it.
  amqp_client.py delete-queue URL --queue Q
"""
import argparse
import json
import sys
import time
import uuid

import pika
import pika.exceptions


def connect(url):
    params = pika.URLParameters(url)
    params.connection_attempts = 5
    params.retry_delay = 2
    params.blocked_connection_timeout = 30
    return pika.BlockingConnection(params)


def user_of(url):
    return pika.URLParameters(url).credentials.username


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
        ch.basic_publish(a.exchange, a.routing_key, b"{}",
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


def cmd_watch(a):
    conn = connect(a.url)
    ch = conn.channel()
    ch.queue_declare(a.queue, durable=True, arguments={"x-queue-type": "classic"})
    for key in a.key:
        ch.queue_bind(a.queue, "booking.events", key)
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
    w = sub.add_parser("watch")
    w.add_argument("url")
    w.add_argument("--queue", required=True)
    w.add_argument("--key", action="append", required=True)
    e = sub.add_parser("wait-event")
    e.add_argument("url")
    e.add_argument("--queue", required=True)
    e.add_argument("--type", required=True)
    e.add_argument("--booking-id")
    e.add_argument("--field", action="append", default=[], help="KEY=VALUE a top-level field must have")
    e.add_argument("--booked", help="HH:MM-HH:MM that the event's avail list must not offer")
    e.add_argument("--timeout", type=float, default=60)
    d = sub.add_parser("delete-queue")
    d.add_argument("url")
    d.add_argument("--queue", required=True)
    a = p.parse_args()
    try:
        return {"book": cmd_book, "refused": cmd_refused, "watch": cmd_watch,
                "wait-event": cmd_wait_event, "delete-queue": cmd_delete_queue}[a.cmd](a)
    except pika.exceptions.AMQPError as e:
        print(f"AMQP error: {e!r}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
