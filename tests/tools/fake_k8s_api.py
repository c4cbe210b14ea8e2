"""A stand-in for the Kubernetes API server's scale subresource of two Deployments, over HTTPS
(Python's http.server + ssl), for the planner's Kubernetes connector test. It answers
GET/PUT /apis/apps/v1/namespaces/NS/deployments/NAME/scale like the API server: an
autoscaling/v1 Scale with metadata.resourceVersion; a PUT whose resourceVersion is not the
current one is 409 Conflict; a request without "Authorization: Bearer TOKEN" is 401. Each request
is appended to LOG as one JSON line {method, path, auth, content_type, body}.

Usage: fake_k8s_api.py CERT KEY PORT_FILE LOG TOKEN NS DEPLOYMENT=REPLICAS... [--edit-on-first-put NAME=N]
  --edit-on-first-put: before answering the first PUT, NAME's replicas become N (a manual
  `kubectl scale` racing the planner), so that PUT conflicts."""
import json
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

cert, key, port_file, log_path, token, ns = sys.argv[1:7]
rest = sys.argv[7:]
edit = None
if "--edit-on-first-put" in rest:
    i = rest.index("--edit-on-first-put")
    name, n = rest[i + 1].split("=")
    edit = (name, int(n))
    rest = rest[:i] + rest[i + 2:]
state = {}
for d in rest:
    name, n = d.split("=")
    state[name] = {"replicas": int(n), "rv": 1}
lock = threading.Lock()
puts = [0]


def scale_of(name):
    s = state[name]
    return {"kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": str(s["rv"]),
                         "uid": "00000000-0000-0000-0000-00000000000" + str(len(name) % 10),
                         "creationTimestamp": "2026-12-03T00:00:00Z"},
            "spec": {"replicas": s["replicas"]},
            "status": {"replicas": s["replicas"], "selector": "app=" + name}}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def handle_any(self, method):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode() if length else ""
        with lock:
            with open(log_path, "a") as f:
                f.write(json.dumps({"method": method, "path": self.path,
                                    "auth": self.headers.get("Authorization"),
                                    "content_type": self.headers.get("Content-Type"),
                                    "body": body}) + "\n")
            if self.headers.get("Authorization") != "Bearer " + token:
                return self.answer(401, {"kind": "Status", "code": 401, "reason": "Unauthorized"})
            parts = self.path.split("/")
            # /apis/apps/v1/namespaces/NS/deployments/NAME/scale
            if len(parts) != 9 or parts[1:5] != ["apis", "apps", "v1", "namespaces"] or parts[5] != ns \
                    or parts[6] != "deployments" or parts[8] != "scale" or parts[7] not in state:
                return self.answer(404, {"kind": "Status", "code": 404, "reason": "NotFound"})
            name = parts[7]
            if method == "GET":
                return self.answer(200, scale_of(name))
            puts[0] += 1
            if edit and puts[0] == 1:
                state[edit[0]]["replicas"] = edit[1]
                state[edit[0]]["rv"] += 1
            obj = json.loads(body)
            if obj["metadata"].get("resourceVersion") != str(state[name]["rv"]):
                return self.answer(409, {"kind": "Status", "code": 409, "reason": "Conflict"})
            state[name]["replicas"] = obj["spec"]["replicas"]
            state[name]["rv"] += 1
            return self.answer(200, scale_of(name))

    def do_GET(self):
        self.handle_any("GET")

    def do_PUT(self):
        self.handle_any("PUT")


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
tls.load_cert_chain(cert, key)
server.socket = tls.wrap_socket(server.socket, server_side=True)
with open(port_file + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
import os
os.rename(port_file + ".tmp", port_file)
server.serve_forever()
