"""A model server that ignores SIGTERM: it answers GET / (its health
check) and nothing else, and only SIGKILL ends it. The unloadTimeout
test (cmd/loadout faults_test.go) stops it to see the grace Loadout
gives before the kill."""
import http.server
import signal
import sys

signal.signal(signal.SIGTERM, signal.SIG_IGN)


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
