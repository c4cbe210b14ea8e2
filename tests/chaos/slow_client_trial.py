#!/usr/bin/env python3
# Usage: python3 tests/chaos/slow_client_trial.py build/tandem   (by hand, about 25 s; needs `ss`)
# The slow-client trial against `tandem run`: 1,200 connections that start a request's
# headers and never finish them; a normal client asks /v1/models every 200 ms throughout; the
# server's open connections are counted with `ss` before, during and after (the header timeout is
# 10 s by default, the connection cap 1024).
import os, socket, subprocess, sys, threading, time, urllib.request
tandem = sys.argv[1]
with socket.socket() as _s:
    _s.bind(("127.0.0.1", 0))
    port = _s.getsockname()[1]
srv = subprocess.Popen([tandem, "run", "--host", "127.0.0.1", "--port", str(port)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
def ok():
    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5).status == 200
    except Exception:
        return False
for _ in range(300):
    if ok(): break
    time.sleep(0.2)
def open_sockets():
    # the server's side of established connections on its port (ss: local port = the server's)
    out = subprocess.run(["ss", "-Htn", "state", "established", f"( sport = :{port} )"],
                         capture_output=True, text=True).stdout
    return len([l for l in out.splitlines() if l.strip()])
base = open_sockets()
stats = {"ok": 0, "fail": 0}
stop = False
def normal():
    while not stop:
        stats["ok" if ok() else "fail"] += 1
        time.sleep(0.2)
t = threading.Thread(target=normal); t.start()
slow = []
t0 = time.time()
for i in range(1200):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Ty")
    slow.append(s)
print(f"server connections: before {base}, after 1,200 half-open connections {open_sockets()} ({time.time() - t0:.1f} s)")
for wait in (5, 12, 20):
    time.sleep(wait - (time.time() - t0) if wait > time.time() - t0 else 0)
    print(f"  at {time.time() - t0:.0f} s: {open_sockets()} server connections")
stop = True; t.join()
closed = 0
for s in slow:
    s.setblocking(False)
    try:
        d = s.recv(4096)
        closed += 1  # b'' (closed) or an answer (408) then closed
    except BlockingIOError:
        pass
    except OSError:
        closed += 1
print(f"normal requests during the trial: {stats['ok']} answered, {stats['fail']} failed; "
      f"half-open connections the server closed or answered: {closed} of 1200")
srv.terminate(); srv.wait()
