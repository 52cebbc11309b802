"""A producer and an operator using a Python client generated from postback's own
/openapi.json (scripts/openapi-client.sh): register a notification whose merchant is
down, read it until it is dead, find it in the dead-letter list, replay it to a URL
that answers, and read it again until it is delivered."""

import http.server
import os
import threading
import time

from client import AuthenticatedClient
from client.api.dead_letters import list_dead_letters, replay_dead_letter
from client.api.notifications import get_notification, register_notification
from client.models import NotifyRequest, NotifyRequestBody, ReplayRequest


class Receiver(http.server.BaseHTTPRequestHandler):
    """/down answers 503; anything else 200 `ok`."""

    delivered = []

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        if self.path.startswith("/down"):
            self.send_response(503)
        else:
            Receiver.delivered.append(self.headers["webhook-id"])
            self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


def wait_for(client, nid, state):
    for _ in range(200):
        seen = get_notification.sync(nid, client=client)
        if seen.state.value == state:
            return seen
        time.sleep(0.05)
    raise AssertionError(f"{nid} never reached {state}; last seen {seen}")


def main():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    client = AuthenticatedClient(base_url=os.environ["POSTBACK_URL"], token=os.environ["POSTBACK_TOKEN"])

    request = NotifyRequest(
        url=f"{base}/down/orders/42",
        body=NotifyRequestBody.from_dict({"order": 42, "status": "paid"}),
        schedule=[],
        topic="client.generated",
    )
    answer = register_notification.sync_detailed(client=client, body=request)
    assert answer.status_code == 202, answer
    nid = answer.parsed.id

    dead = wait_for(client, nid, "dead")
    assert dead.attempts == 1 and dead.history[0].status == 503, dead
    page = list_dead_letters.sync(client=client, topic="client.generated")
    assert [item.id for item in page.items] == [nid], page

    replayed = replay_dead_letter.sync(nid, client=client, body=ReplayRequest(url=f"{base}/up/orders/42"))
    assert replayed.url.endswith("/up/orders/42"), replayed
    delivered = wait_for(client, nid, "delivered")
    assert delivered.replays == 1 and Receiver.delivered == [nid], delivered
    print("generated client: register, read, list, replay: ok")


main()
