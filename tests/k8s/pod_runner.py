"""A local pod runner: the containers of rendered Kubernetes manifests as processes on 127.0.0.1.

Reads the Deployments, StatefulSets and Services that `tandem k8s render` writes and starts each
Deployment pod's container (command + args + env) as a local process, with the real Debian etcd and
nats-server in place of the etcd and NATS StatefulSets. It is a test harness, not a kubelet: it
does only what is listed below, and fails loudly on what it does not understand.

What the runner substitutes (and nothing else):
  1. The executable: a container command whose first word is `tandem` or ends in `/tandem` runs
     the local tandem binary (`binary`). Any other command is an error.
  2. Downward API env (`valueFrom.fieldRef`): status.podIP and status.hostIP -> 127.0.0.1,
     metadata.name -> the pod's name (`<deployment>-<index>`, e.g. g-decode-1), metadata.namespace
     -> `namespace`. Other fieldRefs, resourceFieldRef and configMapKeyRef are errors.
  3. Secrets: `envFrom.secretRef` and `env.valueFrom.secretKeyRef` take their values from the
     `secrets` dict the caller supplies ({secret name: {key: value}}); a missing secret is an error
     unless the reference says `optional: true`.
  4. `$(VAR)` in env values, command and args is expanded as the kubelet does (`$$` escapes it,
     unknown names stay as written).
  5. Service DNS names: `<svc>`, `<svc>.<ns>`, `<svc>.<ns>.svc` or `<svc>.<ns>.svc.cluster.local`
     followed by `:<service port>`, in args and env values -> `127.0.0.1:<local port>`.
  6. Ports: every containerPort of a pod gets a free local port; an arg (or the value of a
     `--flag=N` arg) equal to a declared containerPort becomes that local port. A Service port maps
     to the local port of its target in the first pod its selector matches (etcd/NATS: the local
     server). Probes resolve their port (name or number) the same way.
  7. Listen addresses: an arg `0.0.0.0` or `::` (or `--flag=0.0.0.0`) -> 127.0.0.1, so that
     everything stays on loopback.
  8. Paths: `path_map` ({container path prefix: local path}) rewrites args and env values that are
     such a path or start with `prefix/` (e.g. the model directory inside the image).
Everything else (resources, volumes, affinity, annotations, PDBs) is not run: it is read only by
the schema validation and golden-file checks. The process environment is PATH, HOME, LANG and
TMPDIR of the runner plus the container's env (an image's own ENV is not known here).
Readiness: the container's startupProbe / readinessProbe (httpGet or tcpSocket) polled on
127.0.0.1; without a probe, until its first containerPort accepts.
Every process runs in its own process group with PR_SET_PDEATHSIG=SIGKILL (no orphans even if the
runner is killed) and is stopped by stop_all() (SIGTERM, then SIGKILL after a grace period).
"""

import ctypes
import os
import re
import signal
import socket
import subprocess
import time
import urllib.request

import yaml

LOOPBACK = "127.0.0.1"


def free_port():
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def port_accepts(port, timeout=0.5):
    try:
        with socket.create_connection((LOOPBACK, port), timeout=timeout):
            return True
    except OSError:
        return False


def http_get(url, timeout=5.0):
    """(status, body text); status 0 when the connection failed."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")
    except OSError:
        return 0, ""


def _pdeathsig():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def find_binary(name):
    for d in os.environ.get("PATH", "").split(":") + ["/usr/sbin", "/sbin", "/usr/bin"]:
        p = os.path.join(d or ".", name)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


def expand_vars(text, env):
    """Kubernetes $(VAR) expansion: $$ is a literal $, unknown references stay."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
            continue
        m = re.match(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)", text[i:])
        if m:
            name = m.group(1)
            out.append(env[name] if name in env else m.group(0))
            i += len(m.group(0))
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


class Process:
    def __init__(self, name, argv, env, log_path):
        self.name, self.argv, self.log_path = name, argv, log_path
        self.log_file = open(log_path, "wb")
        self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=self.log_file,
                                     stderr=subprocess.STDOUT, start_new_session=True,
                                     preexec_fn=_pdeathsig)

    def alive(self):
        return self.proc.poll() is None

    def log(self):
        with open(self.log_path, "r", errors="replace") as f:
            return f.read()

    def stop(self, grace=10.0):
        if self.alive():
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the group: anything it started too
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
        self.log_file.close()
        return self.proc.returncode


class Pod:
    def __init__(self, name, ports, process, probe):
        self.name = name
        self.ports = ports          # {container port number: local port}
        self.port_names = {}        # {container port name: container port number}
        self.process = process
        self.probe = probe          # (kind, path, local port) or None

    def local_port(self, name_or_number):
        n = self.port_names.get(name_or_number, name_or_number)
        return self.ports[int(n)]

    def log(self):
        return self.process.log()


class LocalCluster:
    """The rendered objects of one namespace, run on 127.0.0.1. Use start_servers() first (etcd,
    NATS), then start_pod(deployment) per replica; stop_all() at the end."""

    def __init__(self, manifest_text, *, namespace, binary, workdir, secrets=None, path_map=None,
                 print_fn=print):
        self.docs = [d for d in yaml.safe_load_all(manifest_text) if d]
        self.namespace, self.binary, self.workdir = namespace, binary, workdir
        self.secrets, self.path_map = secrets or {}, path_map or {}
        self.print = print_fn
        self.processes = []
        self.pods = {}              # pod name -> Pod
        self.service_ports = {}     # service name -> {service port: local port}
        self.replicas = {}          # deployment name -> replicas started
        os.makedirs(workdir, exist_ok=True)

    def objects(self, kind):
        return [d for d in self.docs if d.get("kind") == kind]

    def get(self, kind, name):
        for d in self.objects(kind):
            if d["metadata"]["name"] == name:
                return d
        raise KeyError(f"no {kind} named {name} in the manifests")

    def _services_selecting(self, labels):
        for svc in self.objects("Service"):
            sel = svc["spec"].get("selector") or {}
            if sel and all(labels.get(k) == v for k, v in sel.items()):
                yield svc

    # --- etcd and NATS: the Debian servers in place of their StatefulSets ---------------------

    def start_servers(self, timeout=20.0):
        for sts in self.objects("StatefulSet"):
            name = sts["metadata"]["name"]
            container = sts["spec"]["template"]["spec"]["containers"][0]
            kind = "etcd" if "etcd" in (container.get("image", "") + container["name"]) else \
                "nats" if "nats" in (container.get("image", "") + container["name"]) else None
            if kind is None:
                raise ValueError(f"StatefulSet {name}: neither etcd nor NATS ({container.get('image')})")
            client_port = {"etcd": 2379, "nats": 4222}[kind]
            labels = sts["spec"]["template"]["metadata"].get("labels", {})
            cports = {p.get("name"): p["containerPort"] for p in container.get("ports", [])}
            local = free_port()
            for svc in self._services_selecting(labels):
                mapping = self.service_ports.setdefault(svc["metadata"]["name"], {})
                for sp in svc["spec"]["ports"]:
                    target = sp.get("targetPort", sp["port"])
                    target = cports.get(target, target)
                    # The client port is served; other ports (peer, monitoring) get a port nobody
                    # listens on.
                    mapping[sp["port"]] = local if int(target) == client_port else free_port()
            if kind == "etcd":
                binary = find_binary("etcd")
                peer = free_port()
                argv = [binary, "--name", "local", "--data-dir", os.path.join(self.workdir, name + ".data"),
                        "--listen-client-urls", f"http://{LOOPBACK}:{local}",
                        "--advertise-client-urls", f"http://{LOOPBACK}:{local}",
                        "--listen-peer-urls", f"http://{LOOPBACK}:{peer}",
                        "--initial-advertise-peer-urls", f"http://{LOOPBACK}:{peer}",
                        "--initial-cluster", f"local=http://{LOOPBACK}:{peer}"]
            else:
                binary = find_binary("nats-server")
                argv = [binary, "-a", LOOPBACK, "-p", str(local)]
            if not binary:
                raise FileNotFoundError(f"{kind}: not installed (scripts/setup.sh installs "
                                        f"{'etcd-server' if kind == 'etcd' else 'nats-server'})")
            proc = self._spawn(name + "-0", argv, dict(self._base_env()))
            self._wait(lambda: port_accepts(local), timeout, f"{name}-0 ({kind}) on :{local}", proc)
            if kind == "etcd":  # listening is not serving: wait for a leader
                url = f"http://{LOOPBACK}:{local}/v3/kv/range"
                def etcd_serves():
                    try:
                        req = urllib.request.Request(url, data=b'{"key":"eA=="}', method="POST")
                        with urllib.request.urlopen(req, timeout=1) as r:
                            return r.status == 200
                    except OSError:
                        return False
                self._wait(etcd_serves, timeout, f"{name}-0 (etcd) serving", proc)
            self.print(f"  {name}-0: {kind} ({binary}) on {LOOPBACK}:{local} in place of the "
                       f"StatefulSet ({container.get('image')})")

    # --- Deployment pods -------------------------------------------------------------------------

    def start_pod(self, deployment, index=None):
        """Starts replica `index` (default: the next one) of `deployment`; returns the Pod, not
        waiting for readiness (wait_ready)."""
        dep = self.get("Deployment", deployment)
        if index is None:
            index = self.replicas.get(deployment, 0)
        self.replicas[deployment] = max(self.replicas.get(deployment, 0), index + 1)
        pod_name = f"{deployment}-{index}"
        template = dep["spec"]["template"]
        containers = template["spec"]["containers"]
        if len(containers) != 1:
            raise ValueError(f"Deployment {deployment}: {len(containers)} containers (the runner "
                             "runs one per pod)")
        c = containers[0]
        ports, names = {}, {}
        for p in c.get("ports", []):
            ports[int(p["containerPort"])] = free_port()
            if p.get("name"):
                names[p["name"]] = int(p["containerPort"])
        # Services selecting this pod point at it when they point nowhere yet.
        labels = template["metadata"].get("labels", {})
        for svc in self._services_selecting(labels):
            mapping = self.service_ports.setdefault(svc["metadata"]["name"], {})
            for sp in svc["spec"]["ports"]:
                target = sp.get("targetPort", sp["port"])
                target = names.get(target, target)
                if sp["port"] not in mapping and int(target) in ports:
                    mapping[sp["port"]] = ports[int(target)]

        env = self._container_env(c, pod_name, ports)
        command = [self._substitute(expand_vars(str(a), env), ports) for a in c.get("command", [])]
        args = [self._substitute(expand_vars(str(a), env), ports) for a in c.get("args", [])]
        if not command:
            raise ValueError(f"Deployment {deployment}: no command (the image's entrypoint is not "
                             "known here)")
        if command[0] != "tandem" and not command[0].endswith("/tandem"):
            raise ValueError(f"Deployment {deployment}: command {command[0]} is not tandem")
        argv = [self.binary] + command[1:] + args
        proc_env = dict(self._base_env())
        proc_env.update(env)
        process = self._spawn(pod_name, argv, proc_env)
        probe = None
        for key in ("startupProbe", "readinessProbe"):
            pr = c.get(key)
            if pr and "httpGet" in pr:
                probe = ("http", pr["httpGet"].get("path", "/"), pr["httpGet"]["port"])
            elif pr and "tcpSocket" in pr:
                probe = ("tcp", None, pr["tcpSocket"]["port"])
        pod = Pod(pod_name, ports, process, None)
        pod.port_names = names
        if probe:
            pod.probe = (probe[0], probe[1], pod.local_port(probe[2]))
        elif ports:
            pod.probe = ("tcp", None, next(iter(ports.values())))
        self.pods[pod_name] = pod
        shown = " ".join(a if re.fullmatch(r"[\w@%+=:,./-]+", a) else repr(a) for a in ["tandem"] + argv[1:])
        self.print(f"  {pod_name}: {shown}")
        return pod

    def wait_ready(self, pod, timeout=90.0):
        kind, path, port = pod.probe or ("none", None, None)
        if kind == "http":
            check = lambda: http_get(f"http://{LOOPBACK}:{port}{path}", timeout=2)[0] == 200
        elif kind == "tcp":
            check = lambda: port_accepts(port)
        else:
            check = lambda: True
        self._wait(check, timeout, f"{pod.name} ready ({kind} probe on :{port}{path or ''})", pod.process)

    def service_url(self, service, port, scheme="http"):
        return f"{scheme}://{LOOPBACK}:{self.service_ports[service][port]}"

    def stop_all(self):
        for p in reversed(self.processes):
            p.stop()
        self.processes.clear()

    # --- helpers -------------------------------------------------------------------------------

    @staticmethod
    def _base_env():
        return {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TMPDIR") if k in os.environ}

    def _spawn(self, name, argv, env):
        p = Process(name, argv, env, os.path.join(self.workdir, name + ".log"))
        self.processes.append(p)
        return p

    def _wait(self, check, timeout, what, process):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not process.alive():
                raise RuntimeError(f"{what}: {process.name} exited ({process.proc.returncode}):\n"
                                   f"{process.log()[-4000:]}")
            if check():
                return
            time.sleep(0.1)
        raise TimeoutError(f"{what}: not within {timeout:.0f} s:\n{process.log()[-4000:]}")

    def _container_env(self, c, pod_name, ports):
        env = {}
        for ref in c.get("envFrom", []):
            if "secretRef" in ref:
                name = ref["secretRef"]["name"]
                if name not in self.secrets:
                    if ref["secretRef"].get("optional"):
                        continue
                    raise KeyError(f"{pod_name}: envFrom secret {name}: not supplied")
                prefix = ref.get("prefix", "")
                for k, v in self.secrets[name].items():
                    env[prefix + k] = v
            else:
                raise ValueError(f"{pod_name}: envFrom {list(ref)} is not supported")
        for e in c.get("env", []):
            name = e["name"]
            if "value" in e:
                env[name] = self._substitute(expand_vars(str(e["value"]), env), ports, arg=False)
            elif "valueFrom" in e:
                vf = e["valueFrom"]
                if "fieldRef" in vf:
                    field = vf["fieldRef"]["fieldPath"]
                    values = {"status.podIP": LOOPBACK, "status.hostIP": LOOPBACK,
                              "metadata.name": pod_name, "metadata.namespace": self.namespace}
                    if field not in values:
                        raise ValueError(f"{pod_name}: env {name}: fieldRef {field} not supported")
                    env[name] = values[field]
                elif "secretKeyRef" in vf:
                    ref = vf["secretKeyRef"]
                    value = self.secrets.get(ref["name"], {}).get(ref["key"])
                    if value is None:
                        if ref.get("optional"):
                            continue
                        raise KeyError(f"{pod_name}: env {name}: secret {ref['name']}/{ref['key']} not supplied")
                    env[name] = value
                else:
                    raise ValueError(f"{pod_name}: env {name}: {list(vf)} not supported")
            else:
                env[name] = ""
        return env

    def _substitute(self, text, ports, arg=True):
        # 5. service DNS names with a port
        def service(m):
            host, port = m.group(1), int(m.group(2))
            parts = host.split(".")
            svc = parts[0]
            if len(parts) > 1 and (parts[1] != self.namespace or
                                   ".".join(parts[2:]) not in ("", "svc", "svc.cluster.local")):
                return m.group(0)
            if svc not in self.service_ports or port not in self.service_ports[svc]:
                return m.group(0)
            return f"{LOOPBACK}:{self.service_ports[svc][port]}"
        text = re.sub(r"(?<![A-Za-z0-9.-])([a-z0-9][a-z0-9.-]*):(\d+)(?!\d)", service, text)
        # 8. container paths
        for prefix, local in self.path_map.items():
            if text == prefix or text.startswith(prefix.rstrip("/") + "/"):
                text = local + text[len(prefix.rstrip("/")):] if text != prefix else local
        if not arg:
            return text
        # 6. container ports, 7. wildcard listen addresses (a whole arg or --flag=value)
        flag, eq, value = text.partition("=") if text.startswith("--") else ("", "", text)
        if value.isdigit() and int(value) in ports:
            value = str(ports[int(value)])
        elif value in ("0.0.0.0", "::", "[::]"):
            value = LOOPBACK
        return flag + eq + value

