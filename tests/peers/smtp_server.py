"""A real SMTP server for the tests: aiosmtpd (PyPI), STARTTLS required with the test's
certificate (a client that does not upgrade may not send). Each message is written to
OUTDIR/<n>.eml and its envelope (from, recipients, whether it came over TLS) to
OUTDIR/<n>.json, the message first. With FAIL_FIRST=N it answers the first N messages
`451` (a transient failure), as a server that is down for a while would.

Usage: smtp_server.py PORT CERT KEY OUTDIR; prints `listening` when it accepts connections.
"""

import asyncio
import json
import os
import ssl
import sys

from aiosmtpd.controller import Controller

PORT, CERT, KEY, OUT = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
FAIL_FIRST = int(os.environ.get("FAIL_FIRST", "0"))


class Handler:
    def __init__(self):
        self.n = 0
        self.refused = 0

    async def handle_DATA(self, server, session, envelope):
        if self.refused < FAIL_FIRST:
            self.refused += 1
            return "451 4.3.0 try again later"
        self.n += 1
        base = os.path.join(OUT, str(self.n))
        with open(base + ".eml.tmp", "wb") as f:
            f.write(envelope.original_content or envelope.content)
        os.rename(base + ".eml.tmp", base + ".eml")
        meta = {"from": envelope.mail_from, "to": envelope.rcpt_tos, "tls": session.ssl is not None}
        with open(base + ".json.tmp", "w") as f:
            json.dump(meta, f)
        os.rename(base + ".json.tmp", base + ".json")
        return "250 OK"


ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
ctx.load_cert_chain(CERT, KEY)
controller = Controller(Handler(), hostname="127.0.0.1", port=PORT, tls_context=ctx,
                        require_starttls=True)
controller.start()
print("listening", flush=True)
try:
    asyncio.get_event_loop().run_forever()
except KeyboardInterrupt:
    pass
finally:
    controller.stop()
