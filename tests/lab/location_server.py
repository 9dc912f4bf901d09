"""A stand-in for GeoClue's location server (the lab has no Internet): answers every POST of
GeoClue's Wi-Fi source (JSON with `wifiAccessPoints`, MLS/Google geolocate form) with one fixed
place, and logs each request, so that Debian's real GeoClue runs its Wi-Fi loop in the lab.

What it cannot show: how a real server's answer time or refusals change GeoClue's timing (a
failed query does not stop GeoClue's scans; only its location goes stale).

    python3 -m tests.lab.location_server PORT LOGFILE
"""

from __future__ import annotations

import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ANSWER = json.dumps({"location": {"lat": 48.8584, "lng": 2.2945}, "accuracy": 30.0}).encode()


class Handler(BaseHTTPRequestHandler):
    log_file = sys.stderr

    def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        try:
            aps = len(json.loads(body or b"{}").get("wifiAccessPoints", []))
        except ValueError:
            aps = -1
        print(f"{time.time():.3f} POST {self.path} {self.headers.get('User-Agent', '-')} "
              f"wifiAccessPoints={aps}", file=self.log_file, flush=True)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(ANSWER)))
        self.end_headers()
        self.wfile.write(ANSWER)

    def log_message(self, format: str, *args: object) -> None:
        pass  # one line per request above is enough


def main() -> None:
    port, log = int(sys.argv[1]), sys.argv[2]
    Handler.log_file = open(log, "a", encoding="utf-8")
    ThreadingHTTPServer(("0.0.0.0", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
