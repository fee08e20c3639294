#!/usr/bin/env python3
"""An outside system's own AMQP client (pika), for the isolation tests.

It does what one broker user with ordinary rights can do, with a client
that is not the project's own, and prints one JSON line with what happened.

  outside_client.py URL bind-exchange SOURCE DESTINATION KEY
  outside_client.py URL bind-queue QUEUE EXCHANGE KEY
  outside_client.py URL declare-queue NAME [ARGUMENTS_JSON]
  outside_client.py URL publish EXCHANGE KEY BODY [USER_ID] [TYPE]

Exit status 0 when the broker accepted the operation, 3 when it refused it
(the reply code and text are printed), 2 for bad arguments.
"""
import json
import sys

import pika


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    url, op, args = argv[1], argv[2], argv[3:]
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    try:
        if op == "bind-exchange" and len(args) == 3:
            channel.exchange_bind(destination=args[1], source=args[0], routing_key=args[2])
        elif op == "bind-queue" and len(args) == 3:
            channel.queue_bind(queue=args[0], exchange=args[1], routing_key=args[2])
        elif op == "declare-queue" and len(args) in (1, 2):
            arguments = json.loads(args[1]) if len(args) > 1 else None
            result = channel.queue_declare(queue=args[0], durable=True, arguments=arguments)
            print(json.dumps({"ok": True, "queue": result.method.queue}))
            return 0
        elif op == "publish" and len(args) in (3, 4, 5):
            channel.confirm_delivery()
            properties = pika.BasicProperties(
                content_type="application/json", delivery_mode=2,
                user_id=args[3] if len(args) > 3 and args[3] else None,
                type=args[4] if len(args) > 4 else None)
            channel.basic_publish(exchange=args[0], routing_key=args[1], body=args[2].encode(), properties=properties)
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except pika.exceptions.ChannelClosedByBroker as refused:
        print(json.dumps({"ok": False, "code": refused.reply_code, "text": refused.reply_text}))
        return 3
    finally:
        if connection.is_open:
            connection.close()
    print(json.dumps({"ok": True}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
