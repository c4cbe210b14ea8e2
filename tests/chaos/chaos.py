#!/usr/bin/env python3
"""Chaos run across test hosts (issue 21): disaggregated tandem on five network namespaces under
open-loop load from `tandem bench`, with workers killed, stopped, cut off and rate-limited, etcd
and NATS restarted, and workers joining mid-run. Prints a table last and exits 1 when a goal fails.

Hosts (tests/chaos/netns.py; 10.77.0.0/24, reachable only from each other):
  a  (.1)  etcd, nats-server, `tandem frontend` (:8000) and the load (`tandem bench`)
  p1 (.11), p2 (.12)  `tandem worker --mode prefill`
  d1 (.21), d2 (.22)  `tandem worker --mode decode --max-local-prefill-tokens 0`: every prompt
                      is prefilled remotely and its KV moves over the tcp backend between hosts
The bundled tiny model on the CPU; every worker has 512 KV blocks and serves /metrics on :9100.

One cycle of faults (seconds after the load started; `--duration` repeats it):
   4 rate-limit p1 and p2 to 40 mbit/s until 12, so that KV writes into d1 are in flight at
   8 SIGKILL d1                                         14 d1 started again (joins mid-run)
  22 SIGSTOP p1 for 4 s (its writes stall)              32 SIGKILL p2, started again at 37
  44 cut d2's link for 6 s                              56 rate-limit p1 to 20 mbit/s for 12 s
  70 restart etcd                                       78 restart nats-server
  86 cut both decode hosts for --outage-s (2 s: shorter than the frontend's wait for a worker)

Goals (the exit code): 0 hung requests (past --timeout), every failed request failing cleanly (an
HTTP error with a JSON body or an SSE error event; not a dropped connection), no failure among
the requests sent during the short total outage (or in the 3 s after it), and every worker's tandem_kv_blocks_used back
at its idle baseline within 45 s of the load's end (the prefill workers included).

Usage: tests/chaos/chaos.py [--tandem build/tandem] [--duration 100] [--rate 2] [--work DIR]
Exit 77 (ctest: skipped) with the reason when namespaces, etcd, nats-server or curl are missing.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import netns  # noqa: E402

HOSTS = {"a": 1, "p1": 11, "p2": 12, "d1": 21, "d2": 22}
WORKERS = ["p1", "p2", "d1", "d2"]
CYCLE_S = 100


def metric(text, name):
    """The value of an unlabelled Prometheus sample `name`, or None."""
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            try:
                return float(line.rsplit(" ", 1)[1])
            except ValueError:
                return None
    return None


class Cluster:
    def __init__(self, net, tandem, work, outage_s):
        self.net, self.tandem, self.work = net, tandem, work
        self.procs = {}
        self.events = []  # (seconds after the load started, what)
        self.t0 = None
        self.outage_s = outage_s
        self.a = net.addr("a")

    def start(self, name, host, argv):
        log = open(os.path.join(self.work, f"{name}.log"), "ab")
        self.procs[name] = subprocess.Popen(self.net.exec_args(host, argv), stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)

    def signal(self, name, sig):
        p = self.procs.get(name)
        if p and p.poll() is None:
            os.kill(p.pid, sig)
            if sig == signal.SIGKILL:
                p.wait(timeout=10)

    def start_etcd(self):
        url = f"http://{self.a}:2379"
        self.start("etcd", "a", ["etcd", "--data-dir", os.path.join(self.work, "etcd"), "--name", "c",
                                 "--listen-client-urls", url, "--advertise-client-urls", url,
                                 "--listen-peer-urls", "http://127.0.0.1:2380",
                                 "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
                                 "--initial-cluster", "c=http://127.0.0.1:2380"])

    def start_nats(self):
        self.start("nats", "a", ["nats-server", "-a", self.a, "-p", "4222"])

    def cluster_flags(self):
        return ["--namespace", "chaos", "--discovery", f"etcd://{self.a}:2379",
                "--event-plane", f"nats://{self.a}:4222"]

    def start_worker(self, host):
        mode = "prefill" if host.startswith("p") else "decode"
        addr = self.net.addr(host)
        argv = [self.tandem, "worker", "--mode", mode, "--host", addr, "--port", "7000",
                "--kv-transfer-host", addr, "--kv-transfer-backend", "tcp", "--instance-id", host,
                "--metrics-port", "9100", "--num-kv-blocks", "512", "--device", "cpu"]
        if mode == "decode":
            argv += ["--max-local-prefill-tokens", "0"]
        self.start(host, host, argv + self.cluster_flags())

    def start_frontend(self):
        self.start("frontend", "a", [self.tandem, "frontend", "--host", self.a, "--port", "8000",
                                     "--migration-limit", "2", "--request-timeout-s", "40"]
                   + self.cluster_flags())

    def get(self, url):
        return self.net.curl("a", url)

    def blocks_used(self, host):
        status, body = self.get(f"http://{self.net.addr(host)}:9100/metrics")
        return metric(body, "tandem_kv_blocks_used") if status == 200 else None

    def wait(self, what, predicate, seconds):
        until = time.time() + seconds
        while time.time() < until:
            if predicate():
                return True
            time.sleep(0.3)
        raise RuntimeError(f"{what} within {seconds} s; logs in {self.work}")

    def ready(self):
        status, body = self.get(f"http://{self.a}:8000/metrics")
        return status == 200 and (metric(body, "tandem_workers") or 0) >= 2

    def probe(self):
        r = subprocess.run(self.net.exec_args("a", [
            "curl", "-s", "-m", "20", "-o", "/dev/null", "-w", "%{http_code}", "-H",
            "content-type: application/json", "-d",
            json.dumps({"prompt": "warm up " * 40, "max_tokens": 4}),
            f"http://{self.a}:8000/v1/completions"]), capture_output=True, text=True, timeout=30)
        return r.stdout.strip() == "200"

    # ---- the faults ----
    def at(self, t, what, action):
        delay = self.t0 + t - time.time()
        if delay > 0:
            time.sleep(delay)
        self.events.append((round(time.time() - self.t0, 1), what))
        action()

    def cycle(self, base):
        n = self.net
        # Slow prefill links around the kill, so that KV writes into d1 are in flight when it dies.
        self.at(base + 4, "rate-limit p1 and p2 40 mbit/s",
                lambda: (n.rate_limit("p1", "40mbit"), n.rate_limit("p2", "40mbit")))
        self.at(base + 8, "SIGKILL d1", lambda: self.signal("d1", signal.SIGKILL))
        self.at(base + 12, "unlimit p1 and p2", lambda: (n.unlimit("p1"), n.unlimit("p2")))
        self.at(base + 14, "d1 joins again", lambda: self.start_worker("d1"))
        self.at(base + 22, "SIGSTOP p1", lambda: self.signal("p1", signal.SIGSTOP))
        self.at(base + 26, "SIGCONT p1", lambda: self.signal("p1", signal.SIGCONT))
        self.at(base + 32, "SIGKILL p2", lambda: self.signal("p2", signal.SIGKILL))
        self.at(base + 37, "p2 joins again", lambda: self.start_worker("p2"))
        self.at(base + 44, "cut d2", lambda: n.cut("d2"))
        self.at(base + 50, "restore d2", lambda: n.restore("d2"))
        self.at(base + 56, "rate-limit p1 20 mbit/s", lambda: n.rate_limit("p1"))
        self.at(base + 68, "unlimit p1", lambda: n.unlimit("p1"))
        self.at(base + 70, "restart etcd", lambda: (self.signal("etcd", signal.SIGKILL), self.start_etcd()))
        self.at(base + 78, "restart nats", lambda: (self.signal("nats", signal.SIGKILL), self.start_nats()))
        self.at(base + 86, f"cut d1 and d2 ({self.outage_s:g} s outage)",
                lambda: (n.cut("d1"), n.cut("d2")))
        self.at(base + 86 + self.outage_s, "restore d1 and d2", lambda: (n.restore("d1"), n.restore("d2")))

    def stop(self):
        for p in self.procs.values():
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for p in self.procs.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass


def classify(req):
    """ok, clean (an HTTP status with a JSON error body, or an SSE error event), unclean, hung."""
    err = req.get("error")
    if err is None:
        return "ok"
    if err == "timeout":
        return "hung"
    msg = req.get("error_message") or ""
    if err.startswith("http_") and '"error"' in msg:
        return "clean"
    if err == "bad_stream" and "error" in msg.lower():
        return "clean"
    return "unclean"


def longest_gap(requests, t_end):
    """The longest time in which no request completed successfully (the time to recover)."""
    done = sorted(r["start_s"] + r["e2e_ms"] / 1000 for r in requests if r.get("error") is None)
    if not done:
        return t_end, 0.0
    best, at, prev = 0.0, done[0], done[0]  # from the first completion on
    for t in done:
        if t - prev > best:
            best, at = t - prev, prev
        prev = t
    return best, at


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tandem", default=os.path.join(os.getcwd(), "build", "tandem"))
    ap.add_argument("--duration", type=float, default=CYCLE_S, help="seconds of load (cycles of 100 s)")
    ap.add_argument("--rate", type=float, default=2.0, help="requests per second (Poisson)")
    ap.add_argument("--outage-s", type=float, default=2.0, help="the short total outage")
    ap.add_argument("--timeout", type=float, default=45.0, help="a request past this is hung")
    ap.add_argument("--work", default="", help="logs and reports (default: a temporary folder)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    args = ap.parse_args()

    why = netns.can_make_namespaces()
    for tool in ("etcd", "nats-server", "curl"):
        if not why and shutil.which(tool) is None and not os.path.exists("/usr/sbin/" + tool):
            why = f"{tool} is not installed"
    if not why and not os.access(args.tandem, os.X_OK):
        why = f"no tandem binary at {args.tandem}"
    if why:
        print(f"SKIP chaos run: {why}")
        return 77
    os.environ["PATH"] += ":/usr/sbin"
    tandem = os.path.abspath(args.tandem)
    work = args.work or tempfile.mkdtemp(prefix="tandem-chaos-")
    os.makedirs(work, exist_ok=True)
    net = netns.Net(HOSTS)
    c = Cluster(net, tandem, work, args.outage_s)
    t_begin = time.time()
    try:
        c.start_etcd()
        c.start_nats()
        c.wait("etcd serving", lambda: c.get(f"http://{c.a}:2379/health")[0] == 200, 20)
        c.start_frontend()
        for h in WORKERS:
            c.start_worker(h)
        c.wait("the frontend listing both decode workers", c.ready, 90)
        c.wait("a first request answered", c.probe, 60)
        time.sleep(2)
        baseline = {h: c.blocks_used(h) for h in WORKERS}
        report = os.path.join(work, "bench.json")
        bench = subprocess.Popen(net.exec_args("a", [
            tandem, "bench", "--url", f"http://{c.a}:8000", "--endpoint", "completions",
            "--request-rate", str(args.rate), "--duration", str(args.duration), "--timeout",
            str(args.timeout), "--input-len", "uniform:200:1200", "--output-len", "24", "--seed", "21",
            "--no-progress", "--output-json", report]),
            stdout=open(os.path.join(work, "bench.txt"), "wb"), stderr=subprocess.STDOUT)
        c.t0 = time.time()
        for base in range(0, int(args.duration), CYCLE_S):
            if base + 90 <= args.duration:
                c.cycle(base)
        bench.wait(timeout=args.duration + args.timeout + 60)
        t_load_end = time.time()
        after = {}
        for h in WORKERS:
            try:
                c.wait(f"{h} back at its KV baseline", lambda h=h: c.blocks_used(h) == baseline[h],
                       max(1, 45 - (time.time() - t_load_end)))
            except RuntimeError:
                pass
            after[h] = c.blocks_used(h)
        fe = c.get(f"http://{c.a}:8000/metrics")[1]
        migrations = metric(fe, "tandem_request_migrations_total")
    finally:
        c.stop()
        net.close()
    with open(report) as f:
        requests = json.load(f)["runs"][0]["requests"]
    kinds = {"ok": 0, "clean": 0, "unclean": 0, "hung": 0}
    for r in requests:
        kinds[classify(r)] += 1
    outage = [t for t, what in c.events if what.startswith("cut d1 and d2")]
    # Sent during the outage or in the 3 s after it (the frontend's health polls find the workers
    # again): each must wait for a worker rather than fail.
    in_outage = [r for r in requests for t in outage if t <= r["start_s"] < t + args.outage_s + 3]
    failed_in_outage = [r for r in in_outage if r.get("error") is not None]
    gap, gap_at = longest_gap(requests, args.duration)

    print(f"chaos run: {len(requests)} requests at {args.rate:g}/s over {args.duration:g} s, "
          f"{len(c.events)} faults, {time.time() - t_begin:.0f} s in all; logs: {work}")
    for t, what in c.events:
        print(f"  {t:6.1f} s  {what}")
    for r in requests:
        if classify(r) != "ok":
            print(f"  {classify(r):7s} at {r['start_s']:.1f} s: {r['error']} {r['error_message'][:160]}")
    rows = [("requests ok", kinds["ok"], ""), ("clean errors", kinds["clean"], ""),
            ("unclean errors", kinds["unclean"], "must be 0"), ("hung", kinds["hung"], "must be 0"),
            ("failed in the short outage", f"{len(failed_in_outage)} of {len(in_outage)}", "must be 0"),
            ("migrations", "-" if migrations is None else int(migrations), ""),
            ("longest time to recover", f"{gap:.1f} s (from {gap_at:.1f} s)", "")]
    back = True
    for h in WORKERS:
        ok = after[h] is not None and after[h] == baseline[h]
        back = back and ok
        rows.append((f"{h} KV blocks used (baseline)", f"{after[h]} ({baseline[h]})",
                     "back" if ok else "NOT BACK"))
    print(f"\n{'':30s} {'value':>24s}  goal")
    for name, value, goal in rows:
        print(f"{name:30s} {str(value):>24s}  {goal}")
    passed = kinds["unclean"] == 0 and kinds["hung"] == 0 and not failed_in_outage and back
    print("chaos run: " + ("PASS" if passed else "FAIL"))
    if not args.keep and not args.work and passed:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
