#!/usr/bin/env python3
"""The local pod runner test (issue 9): `tandem k8s render` of a 1 prefill + 1 decode graph, its
Deployments started as processes on 127.0.0.1 by tests/k8s/pod_runner.py (with the Debian etcd
and nats-server in place of the etcd and NATS StatefulSets), then the checks of the EKS lab
(docs/deploy-eks.md): GET /health; a short and a long chat completion with their TTFT; the
`KV transfer backend:` line in the worker logs; `KV Transfer metrics` in the decode log; and a
scale-up of the decode Deployment from 1 to 2 replicas (a second pod from the same rendered spec)
whose new worker serves requests (its /metrics and its log).

Environment: TANDEM_BINARY (the tandem executable, required), TANDEM_K8S_GRAPH (default
deploy/disagg-1p1d.yaml), TANDEM_K8S_KEEP=1 keeps the work folder (logs, manifest).
Exit status 0 when every check passed; bounded (TIME_LIMIT_S); loopback only; every process it
started is stopped at the end (and killed with it if it dies: PR_SET_PDEATHSIG).
"""

import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pod_runner  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
BINARY = os.environ.get("TANDEM_BINARY", os.path.join(REPO, "build/tandem"))
GRAPH = os.environ.get("TANDEM_K8S_GRAPH", os.path.join(REPO, "deploy/disagg-1p1d.yaml"))
NAMESPACE = "tandem-podtest"
IMAGE = "tandem:podtest"
HF_SECRET = {"HF_TOKEN": "hf_local_pod_runner_not_a_real_token"}
TIME_LIMIT_S = 170  # the whole test; ctest's TIMEOUT is above it

passed, failed = 0, 0
started = time.monotonic()


def check(ok, what, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok     {what}")
    else:
        failed += 1
        print(f"FAILED {what}" + (f"\n{detail}" if detail else ""))
    return ok


def left():
    return TIME_LIMIT_S - (time.monotonic() - started)


def chat(base_port, content, max_tokens, timeout=60):
    """A streamed chat completion: (TTFT s, total s, text, usage dict). TTFT: until the first
    chunk with content (the role-only first chunk does not count)."""
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": content}],
                       "max_tokens": max_tokens, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True},
                       "chat_template_kwargs": {"enable_thinking": False}})
    conn = http.client.HTTPConnection(pod_runner.LOOPBACK, base_port, timeout=timeout)
    t0 = time.monotonic()
    conn.request("POST", "/v1/chat/completions", body, {"content-type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"chat: HTTP {r.status}: {r.read()[:500]!r}")
    ttft, text, usage = None, "", None
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        event = json.loads(data)
        usage = event.get("usage") or usage
        for ch in event.get("choices", []):
            piece = (ch.get("delta") or {}).get("content") or ""
            if piece and ttft is None:
                ttft = time.monotonic() - t0
            text += piece
    total = time.monotonic() - t0
    conn.close()
    return ttft, total, text, usage or {}


def metric(text, name):
    """The sum of a Prometheus metric's samples (any labels); None when absent."""
    values = [float(m.group(1)) for m in
              re.finditer(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M)]
    return sum(values) if values else None


def wait_for(cond, timeout, step=0.25):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return cond()


def render():
    cmd = [BINARY, "k8s", "render", GRAPH, "--namespace", NAMESPACE, "--image", IMAGE]
    print("$ " + " ".join(["tandem"] + cmd[1:]))
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(f"render exited {r.returncode}: {r.stderr}")
    return r.stdout


def last_transfer_line(pod):
    lines = re.findall(r"KV Transfer metrics: .*", pod.log())
    return lines[-1] if lines else "no `KV Transfer metrics` line"


def transfer_line(pod):
    """Waits (at most 15 s: the line comes every --stats-interval-s, 5 s) for a `KV Transfer
    metrics` line counting at least one successful transfer into this decode worker."""
    def seen():
        return any(int(n) > 0 for n in re.findall(r"KV Transfer metrics: Num successful transfers=(\d+)", pod.log()))
    return wait_for(seen, min(15, max(left(), 1)))


def find_deployment(cluster, role):
    """The Deployment of a role (frontend, prefill, decode): <graph>-<role>."""
    names = [d["metadata"]["name"] for d in cluster.objects("Deployment")]
    hits = [n for n in names if n.endswith("-" + role)]
    if len(hits) != 1:
        raise KeyError(f"no single Deployment for {role} among {names}")
    return hits[0]


def long_prompt(tag):
    words = ("the decode pool scales on its own while the prefill pool keeps writing key value "
             "blocks into the decode workers over the transfer backend").split()
    return f"[{tag}] Summarize this text. " + " ".join(words[i % len(words)] for i in range(700))


MODEL = None


def main():
    global MODEL
    if not os.path.exists(BINARY):
        print(f"TANDEM_BINARY {BINARY} does not exist")
        return 1
    work = tempfile.mkdtemp(prefix="tandem-pods-")
    manifest = render()
    with open(os.path.join(work, "manifest.yaml"), "w") as f:
        f.write(manifest)
    # The Secrets the pods read (envFrom secretRef: the Hugging Face token), each with HF_SECRET.
    secret_names = {ref["secretRef"]["name"]
                    for d in pod_runner.yaml.safe_load_all(manifest) if d and d.get("kind") == "Deployment"
                    for c in d["spec"]["template"]["spec"]["containers"]
                    for ref in c.get("envFrom", []) if "secretRef" in ref}
    print(f"Secrets the pods read: {sorted(secret_names) or 'none'} (each given HF_TOKEN)")
    cluster = pod_runner.LocalCluster(
        manifest, namespace=NAMESPACE, binary=BINARY, workdir=work,
        secrets={name: HF_SECRET for name in secret_names}, path_map=PATH_MAP)
    try:
        run(cluster)
    except Exception:
        check(False, "the pod runner ran to the end", traceback.format_exc())
        for p in cluster.processes:
            print(f"--- {p.name} (last 3000 chars of {p.log_path}) ---\n{p.log()[-3000:]}")
    finally:
        cluster.stop_all()
        print(f"stopped every process ({time.monotonic() - started:.1f} s in all)")
        if os.environ.get("TANDEM_K8S_KEEP") == "1":
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 and passed > 0 else 1


PATH_MAP = {}


def run(cluster):
    global MODEL
    kinds = sorted({d["kind"] for d in cluster.docs})
    print(f"rendered {len(cluster.docs)} objects: {', '.join(kinds)}")
    frontend = find_deployment(cluster, "frontend")
    prefill = find_deployment(cluster, "prefill")
    decode = find_deployment(cluster, "decode")
    for name in (prefill, decode):
        replicas = cluster.get("Deployment", name)["spec"].get("replicas", 1)
        check(replicas == 1, f"{name}: replicas {replicas} (the graph's 1)")

    print("starting the StatefulSets' servers and the Deployments' pods on 127.0.0.1:")
    cluster.start_servers()
    workers = [cluster.start_pod(prefill), cluster.start_pod(decode)]
    for pod in workers:
        cluster.wait_ready(pod, timeout=min(90, left()))
    front = cluster.start_pod(frontend)
    cluster.wait_ready(front, timeout=min(60, left()))
    svc = [s for s in cluster.objects("Service") if s["metadata"]["name"] in cluster.service_ports
           and any(p["port"] == 8000 for p in s["spec"]["ports"])]
    check(len(svc) == 1, "one Service on port 8000 (the frontend's)", str([s["metadata"]["name"] for s in svc]))
    port = cluster.service_ports[svc[0]["metadata"]["name"]][8000]
    print(f"the frontend Service {svc[0]['metadata']['name']}:8000 is 127.0.0.1:{port} "
          f"(kubectl port-forward svc/{svc[0]['metadata']['name']} 8000:8000 on a cluster)")

    # the Secret's value reached every tandem process's environment (envFrom)
    for pod in workers + [front]:
        with open(f"/proc/{pod.process.proc.pid}/environ", "rb") as f:
            environ = f.read().split(b"\0")
        token = ("HF_TOKEN=" + HF_SECRET["HF_TOKEN"]).encode() in environ
        check(token, f"{pod.name}: HF_TOKEN from the Secret in its environment")

    # /health and the model list
    status, body = pod_runner.http_get(f"http://127.0.0.1:{port}/health")
    check(status == 200, f"GET /health: {status} {body.strip()[:80]}")
    status, body = pod_runner.http_get(f"http://127.0.0.1:{port}/v1/models")
    MODEL = json.loads(body)["data"][0]["id"] if status == 200 else None
    check(MODEL is not None, f"GET /v1/models: {MODEL}")

    # The decode worker prefills a long prompt remotely once its discovery watch has shown it a
    # prefill worker (before that it prefills locally, as it should): both pods start together,
    # and on a loaded machine the watch can come after the frontend is ready.
    d0 = workers[1]
    check(wait_for(lambda: re.search(r"\b[1-9][0-9]* prefill worker\(s\) available", d0.log()), min(30, left())),
          f"{d0.name} log: a prefill worker available")

    # a short and a long chat completion, TTFT printed
    ttft, total, text, u = chat(port, "Hello! Say hi in five words.", 16)
    check(ttft is not None and text, f"short chat: {u.get('prompt_tokens')} prompt tokens, TTFT "
          f"{ttft * 1000 if ttft else -1:.1f} ms, total {total * 1000:.1f} ms, "
          f"{u.get('completion_tokens')} tokens: {text[:60]!r}")
    ttft, total, text, u = chat(port, long_prompt("one"), 16)
    check(ttft is not None and text, f"long chat: {u.get('prompt_tokens')} prompt tokens, TTFT "
          f"{ttft * 1000 if ttft else -1:.1f} ms, total {total * 1000:.1f} ms, "
          f"{u.get('completion_tokens')} tokens")

    # the same with curl, as docs/deploy-eks.md section 8 does (a stream starts with the first token)
    body = json.dumps({"model": MODEL, "stream": True, "max_tokens": 16,
                       "messages": [{"role": "user", "content": "Hello! Say hi in five words."}]})
    r = subprocess.run(["curl", "-sS", "-N", "-o", "/dev/null", "--max-time", "60",
                        f"http://127.0.0.1:{port}/v1/chat/completions", "-H", "content-type: application/json",
                        "-d", body, "-w", "%{http_code} TTFT %{time_starttransfer}s  total %{time_total}s"],
                       capture_output=True, text=True, timeout=70)
    check(r.returncode == 0 and r.stdout.startswith("200 "), f"curl short chat: {r.stdout} {r.stderr}".strip())

    # the transfer backend in the worker logs, KV Transfer metrics in the decode log
    for pod in workers:
        m = re.search(r"KV transfer backend: .*", pod.log())
        check(m is not None, f"{pod.name} log: {m.group(0) if m else 'no `KV transfer backend:` line'}")
    if not check(transfer_line(d0), f"{d0.name} log: {last_transfer_line(d0)}"):
        print("\n".join(line for line in d0.log().splitlines() if "prefill" in line)[-3000:])

    # scale the decode Deployment 1 -> 2: one more pod from the same rendered spec
    print(f"scaling {decode} from 1 to 2 replicas (kubectl scale deployment/{decode} --replicas=2):")
    d1 = cluster.start_pod(decode)
    cluster.wait_ready(d1, timeout=min(90, left()))
    workers_seen = lambda: metric(
        pod_runner.http_get(f"http://127.0.0.1:{port}/metrics")[1], "tandem_workers") == 2
    check(wait_for(workers_seen, min(20, left())), "the frontend counts 2 live decode workers (tandem_workers 2)")
    metrics_port = d1.local_port("metrics") if "metrics" in d1.port_names else d1.probe[2]
    new_metrics = lambda: pod_runner.http_get(f"http://127.0.0.1:{metrics_port}/metrics")[1]
    sent = 0
    while sent < 12 and left() > 20:
        ttft, total, _, n = chat(port, long_prompt(f"scale-{sent}"), 8)
        sent += 1
        if (metric(new_metrics(), "tandem_kv_transfers_total") or 0) > 0:
            break
    served = metric(new_metrics(), "tandem_prefix_cache_queries_total") or 0
    transfers = metric(new_metrics(), "tandem_kv_transfers_total") or 0
    check(transfers > 0, f"{d1.name} /metrics after {sent} long requests: "
          f"tandem_kv_transfers_total {transfers:.0f}, tandem_prefix_cache_queries_total {served:.0f}")
    check(transfer_line(d1), f"{d1.name} log: {last_transfer_line(d1)}")
    check(all(p.process.alive() for p in cluster.pods.values()), "every pod still running")


if __name__ == "__main__":
    sys.exit(main())
