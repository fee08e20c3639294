#!/usr/bin/env python3
"""Books a room from another system over AMQPS with python `pika`
(pip install pika): what an outside system does against the shipped
compose broker, which publishes AMQP over TLS only and requires user_id
(amqp-tools cannot set it).

  AMQP_URL=amqps://partner-system:SECRET@broker.example.com:5671/%2f \\
  AMQP_CA_FILE=ca.pem  docs/examples/book-over-tls.py [ROOM] [START] [END]

With a client certificate instead of a password (the broker maps its
common name to the user: EXTERNAL):

  AMQP_URL=amqps://partner-system@broker.example.com:5671/%2f AMQP_CA_FILE=ca.pem \\
  AMQP_CERT_FILE=partner.pem AMQP_KEY_FILE=partner.key AMQP_AUTH_MECHANISM=EXTERNAL \\
  docs/examples/book-over-tls.py

The broker's certificate is verified against AMQP_CA_FILE and must name
the host of the URL. Prints the reply (JSON); exit 0 when ok:true.
"""
import datetime
import json
import os
import ssl
import sys
import uuid

import pika

url = os.environ.get("AMQP_URL", "amqps://guest:guest@localhost:5671/%2f")
room = sys.argv[1] if len(sys.argv) > 1 else "Berlin"
start = sys.argv[2] if len(sys.argv) > 2 else "09:00"
end = sys.argv[3] if len(sys.argv) > 3 else "10:30"

# pika needs a password field in the URL; EXTERNAL sends none.
if "@" in url and ":" not in url.split("://", 1)[1].split("@", 1)[0]:
    url = url.replace("@", ":@", 1)
params = pika.URLParameters(url)
if url.startswith("amqps://"):
    # Verify the broker: its CA, and its certificate naming the host.
    context = ssl.create_default_context(cafile=os.environ.get("AMQP_CA_FILE"))
    if os.environ.get("AMQP_CERT_FILE"):
        context.load_cert_chain(os.environ["AMQP_CERT_FILE"], os.environ.get("AMQP_KEY_FILE"))
    params.ssl_options = pika.SSLOptions(context, server_hostname=params.host)
    if os.environ.get("AMQP_AUTH_MECHANISM", "").upper() == "EXTERNAL":
        params.credentials = pika.credentials.ExternalCredentials()
user = pika.URLParameters(url).credentials.username

connection = pika.BlockingConnection(params)
channel = connection.channel()
channel.confirm_delivery()
# Direct reply-to: no queue to declare or clean up.
replies = []
channel.basic_consume("amq.rabbitmq.reply-to", lambda ch, m, p, b: replies.append((p, b)), auto_ack=True)

message_id = str(uuid.uuid4())  # the idempotency key: send again with the same id after a failure
date = (datetime.date.today() + datetime.timedelta(days=1)).isoformat()
body = {"room": room, "date": date, "start": start, "end": end, "title": "Sprint review",
        "attendees": [{"name": "Ada Lovelace", "email": "ada@example.com", "phone": "0170 1234567"}]}
channel.basic_publish(
    "booking.commands", "booking.create", json.dumps(body).encode(),
    pika.BasicProperties(content_type="application/json", delivery_mode=2, type="booking.create",
                         message_id=message_id, correlation_id=message_id,
                         reply_to="amq.rabbitmq.reply-to", user_id=user),
    mandatory=True)
connection.process_data_events(time_limit=0)
deadline = 30
while not replies and deadline > 0:
    connection.process_data_events(time_limit=0.5)
    deadline -= 0.5
connection.close()
if not replies:
    sys.exit("no reply within 30 s")
reply = json.loads(replies[0][1])
print(json.dumps(reply, indent=2))
sys.exit(0 if reply.get("ok") is True else 1)
