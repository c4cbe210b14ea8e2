"""A local pod runner: the containers of rendered Kubernetes manifests as processes on 127.0.0.1.

Reads the Deployments, StatefulSets and Services that `tandem k8s render` writes and starts each
pod's one container (its command + args + env) as a local process: tandem containers run the local
tandem binary; the etcd and NATS StatefulSets run Debian's etcd and nats-server with the rendered
args. It is a test harness, not a kubelet: it does only what is listed below, and fails loudly on
what it does not understand (several containers, init containers, unknown env sources).

What the runner substitutes (and nothing else):
  1. The executable: a command whose first word is `tandem` (or ends in `/tandem`) -> the local
     tandem binary; a command `etcd` in an etcd image -> Debian's etcd; a command `nats-server`
     (or none: the image's entrypoint runs nats-server with the args) in a nats image -> Debian's
     nats-server, plus `--addr 127.0.0.1` unless the args give an address (nats-server listens on
     every interface by default). Anything else is an error.
  2. Downward API env (`valueFrom.fieldRef`): status.podIP and status.hostIP -> 127.0.0.1,
     metadata.name -> the pod's name (`<workload>-<index>`, e.g. g-decode-1), metadata.namespace ->
     `namespace`. Other fieldRefs, resourceFieldRef and configMapKeyRef are errors.
  3. Secrets: `envFrom.secretRef` and `env.valueFrom.secretKeyRef` take their values from the
     `secrets` dict the caller supplies ({secret name: {key: value}}); a missing secret is an error
     unless the reference says `optional: true`.
  4. `$(VAR)` in env values, command and args is expanded as the kubelet does (`$$` escapes it,
     unknown names stay as written).
  5. Service DNS names: `<svc>`, `<svc>.<ns>`, `<svc>.<ns>.svc` or `<svc>.<ns>.svc.cluster.local`
     followed by `:<service port>`, anywhere in an arg or env value -> `127.0.0.1:<local port>`.
  6. Ports: every containerPort of a pod gets a free local port; an arg (or the value of a
     `--flag=N` arg) equal to a declared containerPort becomes that local port. A Service port maps
     to the local port of its targetPort in the first pod its selector matches. Probes resolve
     their port (name or number) the same way.
  7. Listen addresses: an arg `0.0.0.0` or `::` (or `--flag=0.0.0.0`) -> 127.0.0.1, and
     `0.0.0.0:N` / `[::]:N` inside an arg -> `127.0.0.1:<local port of N>` (a port the container
     does not declare, e.g. etcd's peer port, gets a free local port too).
  8. Paths: the mountPath of an emptyDir volume (except /dev/shm, which stays the machine's) -> a
     fresh folder in `workdir`, and `path_map` ({container path: local path}) -> local, in args
     (whole, or the value of `--flag=PATH`) and env values that are such a path or lie under it.
Everything else (image, resources, volumes of other kinds, affinity, tolerations, annotations,
PodDisruptionBudgets) is not run: the schema validation and golden-file tests read it. The
process environment is PATH, HOME, LANG and TMPDIR of the runner plus the container's env (an
image's own ENV is not known here). Readiness: the container's readinessProbe (else its
startupProbe; httpGet or tcpSocket) polled on 127.0.0.1; without a probe, until its first port
accepts. Every process runs in its own process group with PR_SET_PDEATHSIG=SIGKILL (no orphans
even if the runner is killed) and is stopped by stop_all() (SIGTERM, then SIGKILL after a grace
period).
"""

import ctypes
import os
import random
import re
import signal
import socket
import subprocess
import time
import urllib.request

import yaml

LOOPBACK = "127.0.0.1"


def free_port():
    """A port free a moment ago, drawn below the kernel's ephemeral range (32768-60999 by
    default), where the next outgoing connection of any process could take it before the pod
    binds it (tests/integration/process_util.h, FreePort)."""
    for _ in range(200):
        port = random.randint(20000, 31999)
        with socket.socket() as s:
            try:
                s.bind((LOOPBACK, port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 20000-31999")


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

    # --- pods ----------------------------------------------------------------------------------

    def start_servers(self, timeout=30.0):
        """Starts every StatefulSet's pod (etcd, NATS: Debian's binaries with the rendered args)
        and waits until each is ready."""
        for sts in self.objects("StatefulSet"):
            pod = self._start(sts, 0)
            self.wait_ready(pod, timeout)

    def start_pod(self, deployment, index=None):
        """Starts replica `index` (default: the next one) of `deployment`; returns the Pod, not
        waiting for readiness (wait_ready)."""
        dep = self.get("Deployment", deployment)
        if index is None:
            index = self.replicas.get(deployment, 0)
        return self._start(dep, index)

    def _executable(self, workload, c):
        """The local program for a container: tandem, or Debian's etcd / nats-server."""
        name = workload["metadata"]["name"]
        command = [str(a) for a in c.get("command", [])]
        image = c.get("image", "")
        if command and (command[0] == "tandem" or command[0].endswith("/tandem")):
            return self.binary, command[1:], []
        program = os.path.basename(command[0]) if command else ""
        if program == "etcd" and "etcd" in image:
            binary = find_binary("etcd")
            extra = []
        elif program in ("nats-server", "") and "nats" in image:
            # (no command: the nats image's entrypoint runs nats-server with the args)
            binary = find_binary("nats-server")
            args = [str(a) for a in c.get("args", [])]
            listens = any(a in ("-a", "--addr", "--net") or a.startswith(("-a=", "--addr=", "--net="))
                          for a in args)
            extra = [] if listens else ["--addr", LOOPBACK]  # else every interface
        else:
            raise ValueError(f"{workload['kind']} {name}: container {c['name']} ({image}, command "
                             f"{command}): not tandem, etcd or nats")
        if not binary:
            raise FileNotFoundError(f"{name}: {os.path.basename(command[0]) if command else 'nats-server'}"
                                    " is not installed (scripts/setup.sh installs etcd-server and nats-server)")
        return binary, command[1:], extra

    def _start(self, workload, index):
        kind, name = workload["kind"], workload["metadata"]["name"]
        self.replicas[name] = max(self.replicas.get(name, 0), index + 1)
        pod_name = f"{name}-{index}"
        template = workload["spec"]["template"]
        containers = template["spec"]["containers"]
        if len(containers) != 1 or template["spec"].get("initContainers"):
            raise ValueError(f"{kind} {name}: the runner runs pods of exactly one container")
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
        # emptyDir volumes: a fresh local folder each (/dev/shm stays the machine's).
        dirs = {}
        empty = {v["name"] for v in template["spec"].get("volumes", []) if "emptyDir" in v}
        for m in c.get("volumeMounts", []):
            if m["name"] in empty and m["mountPath"] != "/dev/shm":
                dirs[m["mountPath"]] = os.path.join(self.workdir, pod_name + "." + m["name"])
                os.makedirs(dirs[m["mountPath"]], exist_ok=True)

        binary, command_rest, extra = self._executable(workload, c)
        env = self._container_env(c, pod_name, ports, dirs)
        sub = lambda a: self._substitute(expand_vars(str(a), env), ports, dirs)
        argv = [binary] + [sub(a) for a in command_rest] + [sub(a) for a in c.get("args", [])] + extra
        proc_env = dict(self._base_env())
        proc_env.update(env)
        process = self._spawn(pod_name, argv, proc_env)
        pod = Pod(pod_name, ports, process, None)
        pod.port_names = names
        for key in ("startupProbe", "readinessProbe"):
            pr = c.get(key)
            if pr and "httpGet" in pr:
                pod.probe = ("http", pr["httpGet"].get("path", "/"), pod.local_port(pr["httpGet"]["port"]))
            elif pr and "tcpSocket" in pr:
                pod.probe = ("tcp", None, pod.local_port(pr["tcpSocket"]["port"]))
        if pod.probe is None and ports:
            pod.probe = ("tcp", None, next(iter(ports.values())))
        self.pods[pod_name] = pod
        shown = " ".join(a if re.fullmatch(r"[\w@%+=:,./-]+", a) else repr(a)
                         for a in [os.path.basename(argv[0])] + argv[1:])
        self.print(f"  {pod_name} ({kind}, image {c.get('image')}): {shown}")
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

    def _container_env(self, c, pod_name, ports, dirs):
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
                env[name] = self._substitute(expand_vars(str(e["value"]), env), ports, dirs, arg=False)
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

    def _substitute(self, text, ports, dirs, arg=True):
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
        # 7. wildcard listen addresses with a port: the container port's local port (an undeclared
        # port gets a free one too)
        def wildcard(m):
            port = int(m.group(2))
            if port not in ports:
                ports[port] = free_port()
            return f"{LOOPBACK}:{ports[port]}"
        text = re.sub(r"(?<![\w.:])(0\.0\.0\.0|\[::\]):(\d+)(?!\d)", wildcard, text)
        # 8. container paths: emptyDir mounts, then path_map
        for prefix, local in list(dirs.items()) + list(self.path_map.items()):
            if text == prefix or text.startswith(prefix.rstrip("/") + "/"):
                text = local + text[len(prefix.rstrip("/")):]
            elif arg and text.startswith("--") and "=" in text:
                flag, _, value = text.partition("=")
                if value == prefix or value.startswith(prefix.rstrip("/") + "/"):
                    text = flag + "=" + local + value[len(prefix.rstrip("/")):]
        if not arg:
            return text
        # 6. container ports, 7. wildcard listen addresses (a whole arg or --flag=value)
        flag, eq, value = text.partition("=") if text.startswith("--") else ("", "", text)
        if value.isdigit() and int(value) in ports:
            value = str(ports[int(value)])
        elif value in ("0.0.0.0", "::", "[::]"):
            value = LOOPBACK
        return flag + eq + value
