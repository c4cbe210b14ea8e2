"""Test hosts in network namespaces for tests/chaos/chaos.py (issue 21), with iproute2 and tc.

Topology: one switch namespace holding a Linux bridge, and one namespace per test host joined to
it by a veth pair (eth0 on the host side, 10.77.0.<n>/24). Nothing is routed to or from the
machine's own namespace, so the hosts' traffic stays between them. A link cut is the switch-side
veth set down (the host keeps its address; its packets go nowhere, as with a pulled cable); a
rate limit is a tbf qdisc on the host's eth0 (this kernel has no netem: delay and loss come from
cuts, SIGSTOP and rate limits instead).

Every name carries the creating process id, and Net.close() deletes every namespace it made
(their veths go with them), also after a failure.
"""

import os
import subprocess

SUBNET = "10.77.0"


def run(*args, check=True):
    return subprocess.run(list(args), check=check, capture_output=True, text=True, timeout=30)


def can_make_namespaces():
    """Empty string when `ip netns add` works here, else why not (the test skips then)."""
    for tool in ("ip", "tc"):
        if subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True).returncode != 0:
            return f"{tool} (iproute2) is not installed"
    name = f"tndprobe{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if r.returncode != 0:
        return "cannot create network namespaces here: " + (r.stderr.strip() or "ip netns add failed")
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return ""


class Net:
    def __init__(self, hosts):
        """hosts: name -> last address byte, e.g. {"a": 1, "p1": 11}."""
        self.tag = f"tc{os.getpid() % 100000}"
        self.switch = f"{self.tag}-sw"
        self.hosts = dict(hosts)
        self.made = []
        try:
            self._make()
        except Exception:
            self.close()
            raise

    def ns(self, host):
        return f"{self.tag}-{host}"

    def addr(self, host):
        return f"{SUBNET}.{self.hosts[host]}"

    def _port(self, host):
        return f"v{self.tag[2:]}{host}"[:15]  # switch-side veth name (15 characters at most)

    def _make(self):
        run("ip", "netns", "add", self.switch)
        self.made.append(self.switch)
        run("ip", "-n", self.switch, "link", "set", "lo", "up")
        run("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        run("ip", "-n", self.switch, "link", "set", "br0", "up")
        for host in self.hosts:
            ns = self.ns(host)
            run("ip", "netns", "add", ns)
            self.made.append(ns)
            run("ip", "-n", ns, "link", "set", "lo", "up")
            run("ip", "-n", self.switch, "link", "add", self._port(host), "type", "veth", "peer",
                "name", "eth0", "netns", ns)
            run("ip", "-n", self.switch, "link", "set", self._port(host), "master", "br0")
            run("ip", "-n", self.switch, "link", "set", self._port(host), "up")
            run("ip", "-n", ns, "addr", "add", f"{self.addr(host)}/24", "dev", "eth0")
            run("ip", "-n", ns, "link", "set", "eth0", "up")

    def exec_args(self, host, argv):
        """argv run inside host's namespace (ip netns exec execs it: the pid is the program's)."""
        return ["ip", "netns", "exec", self.ns(host)] + list(argv)

    def cut(self, host):
        run("ip", "-n", self.switch, "link", "set", self._port(host), "down")

    def restore(self, host):
        run("ip", "-n", self.switch, "link", "set", self._port(host), "up")

    def rate_limit(self, host, rate="20mbit"):
        run("tc", "-n", self.ns(host), "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", rate,
            "burst", "32kbit", "latency", "400ms")

    def unlimit(self, host):
        run("tc", "-n", self.ns(host), "qdisc", "del", "dev", "eth0", "root", check=False)

    def curl(self, host, url, timeout=5):
        """GET url from inside host's namespace: (status, body); status 0 when unreachable."""
        r = subprocess.run(self.exec_args(host, ["curl", "-s", "-m", str(timeout), "-w", "\n%{http_code}",
                                                 url]), capture_output=True, text=True,
                           timeout=timeout + 5)
        body, _, code = r.stdout.rpartition("\n")
        return (int(code) if code.isdigit() else 0), body

    def close(self):
        for ns in reversed(self.made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.made = []
