# SPDX-License-Identifier: BSD-3-Clause
"""The cluster tools/soak and tools/chaos run on (issue 36): network-namespace hosts,
supervised daemons, throw-away users, the verifying jobs and their outcomes, and the
command-line frame both share. Imported by those two scripts; not run on its own."""

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time

import user_access

# The repository: this file is tools/lib/netns_cluster.py.
SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESTART_SEC = 1.0  # RestartSec= of nicemu@.service
# What the test programs print when data they read is not what was written (as opposed to a
# call that failed): the "wrong data" outcome.
WRONG_DATA = re.compile(r"other bytes|bytes of rank|impossible value|unexpected or duplicated|counter after|"
                        r"corrupted|byte \d+ wrong|got seq|, want '|MISMATCH|check failed|unexpected descriptor|"
                        r"remote CQE names|FAILED: token|differ")


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, flush=True)


def run(argv, check=True, timeout=30, **kw):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {r.returncode}: {r.stderr.strip()[:400]}")
    return r


def fabric_files(ctl, out, addrs):
    """A fresh cluster key (each run its own, replacing an earlier run's in OUT) and the
    fabric map of ADDRS (port 7700) in OUT; returns their paths."""
    key = os.path.join(out, "fabric.key")
    if os.path.exists(key):
        os.unlink(key)
    run([ctl, "keygen", key])
    os.chmod(key, 0o600)
    fabric = os.path.join(out, "fabric.toml")
    open(fabric, "w").write(run([ctl, "fabric", "gen", "--port", "7700"] + addrs).stdout)
    return key, fabric


class Skip(Exception):
    pass


# ---- the cluster: namespaces, users, supervised daemons ----

class Supervisor(threading.Thread):
    """Restart=always for one daemon: runs it, and when it exits for any reason starts it
    again RESTART_SEC later (at once for a restart() asked for, like `systemctl restart`)."""

    def __init__(self, cluster, i):
        super().__init__(daemon=True)
        self.c, self.i = cluster, i
        self.proc = None
        self.starts = 0
        self.unexpected_exits = []  # (time, status) of exits nobody asked for
        self.stopping = False
        self.planned = 0  # exits asked for (chaos kill/restart)
        self.immediate = threading.Event()
        self.lock = threading.Lock()

    def run(self):
        logf = open(os.path.join(self.c.out, f"daemon{self.i}.log"), "ab")
        while not self.stopping:
            with self.lock:
                if self.stopping:
                    break
                self.proc = subprocess.Popen(
                    ["ip", "netns", "exec", self.c.ns[self.i], self.c.daemon, "--config", self.c.conf[self.i],
                     "--node", str(self.i)], stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=True)
                self.starts += 1
            rc = self.proc.wait()
            if self.stopping:
                break
            with self.lock:
                if self.planned > 0:
                    self.planned -= 1
                else:
                    self.unexpected_exits.append((time.time(), rc))
            logf.write(f"supervisor: daemon {self.i} exited with {rc}, restarting\n".encode())
            logf.flush()
            self.immediate.wait(RESTART_SEC)  # RestartSec=, cut short by an asked-for restart
            self.immediate.clear()

    def pid(self):
        return self.proc.pid if self.proc else None

    def signal(self, sig, immediate=False):
        with self.lock:
            self.planned += 1
            if immediate:
                self.immediate.set()
            try:
                os.kill(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def stop(self):
        self.stopping = True
        p = self.proc
        if p and p.poll() is None:
            p.terminate()
            try:
                p.wait(3)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


class Cluster:
    def __init__(self, args):
        self.a = args
        b = args.build
        self.build = b
        self.daemon = os.path.join(b, "nicemu/daemon/nicemu")
        self.ctl = os.path.join(b, "tools/nicemuctl/nicemuctl")
        self.prog = {
            "rma": os.path.join(b, "tests/integration/fabric_rma"),
            "smsg": os.path.join(b, "tests/integration/fabric_smsg"),
            "dgram": os.path.join(b, "tests/integration/fabric_dgram"),
            "dmapp": os.path.join(b, "tests/integration/dmapp_suite"),
            "histogram": os.path.join(b, "examples/dmapp_histogram"),
            "ce": os.path.join(b, "tests/integration/ce_conformance"),
            "ring": os.path.join(b, "examples/gni_ring"),
            "msgq": os.path.join(b, "bench/gni_bench"),
        }
        self.tag = f"sk{os.getpid() % 100000}"
        self.sw = self.tag + "sw"
        self.ns = [f"{self.tag}h{i}" for i in range(args.hosts)]
        self.net = f"10.214.{os.getpid() % 200}."
        self.users = []
        self.sup = []
        self.netem = None
        self.jobs_live = {}  # job id -> Popen, for cleanup
        self.made_ns = False

    # -- set-up --
    def check_env(self):
        if os.geteuid() != 0:
            raise Skip("needs root (network namespaces, users)")
        for c in ("ip", "tc", "useradd", "userdel", "setpriv", "mpiexec.hydra"):
            if not shutil.which(c):
                raise Skip(f"{c} needed")
        for p in [self.daemon, self.ctl] + list(self.prog.values()):
            if not os.access(p, os.X_OK):
                raise Skip(f"{p} not built")

    def up(self):
        self.out = self.a.out
        os.makedirs(self.out, exist_ok=True)
        os.chmod(self.out, 0o755)  # the users' ranks reach the daemons' sockets through it
        hosts = os.path.join(SRC, "tools/lib/netns-hosts.sh")
        self.made_ns = True
        r = subprocess.run(["bash", "-c", f'. "{hosts}"; netns_hosts_up "$@"', "netns-up", self.sw, self.net] + self.ns,
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise Skip(f"cannot build the namespace network: {r.stderr.strip()}")
        # The launcher (mpiexec) lives on the bridge's own namespace, so every host is remote to it.
        run(["ip", "-n", self.sw, "addr", "add", self.net + "254/24", "dev", "br0"])
        self.ifname = [f"{self.sw}h{i}" for i in range(len(self.ns))]
        r = subprocess.run(["ip", "netns", "exec", self.ns[0], "tc", "qdisc", "add", "dev", self.ifname[0], "root",
                            "netem", "loss", "0%"], capture_output=True, text=True)
        self.netem = r.returncode == 0
        if self.netem:
            run(["ip", "netns", "exec", self.ns[0], "tc", "qdisc", "del", "dev", self.ifname[0], "root"])
        else:
            log(f"note: tc netem unavailable ({r.stderr.strip()[:80]}); a link goes down with ip link set down")
        for k, u in enumerate(("a", "b")):
            name = f"nsoak{u}{os.getpid()}"
            run(["useradd", "--system", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", name])
            self.users.append(name)
        key, fabric = fabric_files(self.ctl, self.out, [self.net + str(i + 1) for i in range(len(self.ns))])
        self.rundir, self.conf = [], []
        for i in range(len(self.ns)):
            d = os.path.join(self.out, f"host{i}")
            os.makedirs(d, exist_ok=True)
            os.chmod(d, 0o755)
            self.rundir.append(d)
            conf = os.path.join(self.out, f"nicemu{i}.toml")
            open(conf, "w").write(f'rundir = "{d}"\nfabric = "{fabric}"\nfabric_key = "{key}"\n'
                                  f'log_level = "{self.a.log_level}"\n')
            self.conf.append(conf)
        # Hydra's rsh launcher for a "host" that is a namespace: the proxy runs there as the
        # job's user ($SOAK_USER, from mpiexec's environment) with that host's run directory.
        self.rsh = os.path.join(self.out, "netns-rsh")
        cases = "\n".join(f"  {self.net}{i + 1}) i={i} ;;" for i in range(len(self.ns)))
        open(self.rsh, "w").write(f"""#!/bin/bash
host=$1; shift
case "$host" in
{cases}
  *) echo "netns-rsh: unknown host $host" >&2; exit 1 ;;
esac
ns=({' '.join(self.ns)})
exec ip netns exec "${{ns[$i]}}" setpriv --reuid "$SOAK_USER" --regid "$SOAK_USER" --init-groups \\
  env NICEMU_RUNDIR={self.out}/host$i NICEMU_NODE=$i sh -c "$*"
""")
        os.chmod(self.rsh, 0o755)
        self.check_user_access()
        for i in range(len(self.ns)):
            s = Supervisor(self, i)
            self.sup.append(s)
            s.start()
        for i in range(len(self.ns)):
            self.wait_up(i, 30)

    def check_user_access(self):
        """Fails at once, naming the blocking path component, when a job user cannot run the
        build's programs or use the output and run directories (a build in root's 0700 home
        would otherwise fail every job, the reason only in the job logs)."""
        msgs = []
        for u in self.users:  # made alike: the first user refused says it for both
            msgs = user_access.check(u, execs=sorted(self.prog.values()), dirs=[self.out] + self.rundir)
            if msgs:
                break
        if msgs:
            raise RuntimeError("the jobs' users cannot reach the build or output directory:\n  " +
                               "\n  ".join(msgs))

    def wait_up(self, i, limit):
        t0 = time.time()
        while time.time() - t0 < limit:
            r = subprocess.run([self.ctl, "--rundir", self.rundir[i], "--node", str(i), "--timeout", "1", "status"],
                               capture_output=True)
            if r.returncode == 0:
                return time.time() - t0
            time.sleep(0.1)
        raise RuntimeError(f"daemon of host {i} did not come up in {limit} s (log {self.out}/daemon{i}.log)")

    def wait_fabric_up(self, limit):
        """Seconds until no daemon holds a peer's channel down (after a link down past the
        retry budget a channel is down until a probe, every 0.5 s, is answered: a job started
        before that has its first operations refused at once, by design)."""
        t0 = time.time()
        while time.time() - t0 < limit:
            down = [(i, p.get("nic_addr")) for i in range(len(self.ns))
                    for p in (((self.status(i) or {}).get("fabric") or {}).get("peers") or [])
                    if p.get("state") == "down"]
            if not down:
                return time.time() - t0
            time.sleep(0.1)
        raise RuntimeError(f"fabric channels still down after {limit} s: {down}")

    # -- state --
    def status(self, i):
        r = subprocess.run([self.ctl, "--rundir", self.rundir[i], "--node", str(i), "--timeout", "2", "status", "--json"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            return None
        j = json.loads(r.stdout)
        if isinstance(j, dict) and "nodes" in j:
            j = j["nodes"][0] if j["nodes"] else {}
        elif isinstance(j, list):
            j = j[0] if j else {}
        return j

    def snapshot(self, i):
        """What the report and the baseline check need of host i's daemon."""
        s = {"host": i, "pid": self.sup[i].pid(), "starts": self.sup[i].starts}
        pid = s["pid"]
        try:
            for line in open(f"/proc/{pid}/status"):
                if line.startswith("VmRSS:"):
                    s["rss_kib"] = int(line.split()[1])
            fds = os.listdir(f"/proc/{pid}/fd")
            s["fds"] = len(fds)
            memfd = 0
            for f in fds:
                try:
                    if os.readlink(f"/proc/{pid}/fd/{f}").startswith("/memfd:"):
                        memfd += 1
                except OSError:
                    pass
            s["memfds"] = memfd
        except OSError:
            s["rss_kib"] = s["fds"] = s["memfds"] = -1
        s["files"] = len(os.listdir(self.rundir[i]))
        st = self.status(i)
        if st is None:
            s.update(cdms=-1, regs=-1, mboxes=-1, creds=-1, msgq=-1, epoch=None)
        else:
            cdms = st.get("cdms", [])
            s["cdms"] = len(cdms)
            s["regs"] = sum(c.get("registrations", 0) for c in cdms)
            s["mboxes"] = sum(c.get("mailboxes", 0) for c in cdms)
            s["creds"] = len(st.get("credentials", []))
            s["msgq"] = len(st.get("msgq", []))
            s["epoch"] = (st.get("fabric") or {}).get("epoch")
        return s

    def shm_files(self):
        """Files in /dev/shm of the jobs' users (what nicemu or a job could leave); other
        sessions' files on a shared machine are not this run's."""
        if not hasattr(self, "user_uids"):
            self.user_uids = {int(run(["id", "-u", u]).stdout) for u in self.users}
        uids = self.user_uids
        n = 0
        try:
            for f in os.listdir("/dev/shm"):
                try:
                    if os.stat(os.path.join("/dev/shm", f)).st_uid in uids:
                        n += 1
                except OSError:
                    pass
        except OSError:
            return -1
        return n

    # -- credentials --
    def cred_issue(self, user):
        uid = str(int(run(["id", "-u", user]).stdout))
        r = run([self.ctl, "--rundir", self.rundir[0], "--node", "0", "cred", "issue", "--uid", uid, "--export"])
        env = dict(re.findall(r"(PMI_GNI_PTAG|PMI_GNI_COOKIE)=['\"]?([0-9a-fA-Fx]+)", r.stdout))
        for i in range(1, len(self.ns)):
            run([self.ctl, "--rundir", self.rundir[i], "--node", str(i), "cred", "grant", "--ptag", env["PMI_GNI_PTAG"],
                 "--cookie", env["PMI_GNI_COOKIE"], "--uid", uid])
        return env

    def cred_revoke(self, env, user):
        """The job's epilog: its credential, and any other the job's user holds (gni_bench asks
        the daemon for its own), revoked on every host."""
        uid = int(run(["id", "-u", user]).stdout)
        for i in range(len(self.ns)):
            creds = {(env["PMI_GNI_PTAG"], env["PMI_GNI_COOKIE"])}
            st = self.status(i) or {}
            for cr in st.get("credentials", []):
                if cr.get("uid") == uid and "drc" not in cr:
                    creds.add((str(cr["ptag"]), str(cr["cookie"])))
            for ptag, cookie in creds:
                subprocess.run([self.ctl, "--rundir", self.rundir[i], "--node", str(i), "--timeout", "2", "cred",
                                "revoke", "--ptag", ptag, "--cookie", cookie], capture_output=True)

    def fault(self, spec):
        for i in range(len(self.ns)):
            args = ["fault", "reset"] + spec.split() if spec else ["fault", "off"]
            run([self.ctl, "--rundir", self.rundir[i], "--node", str(i)] + args)

    # -- links --
    def link(self, i, down):
        ns, dev = self.ns[i], self.ifname[i]
        if self.netem:
            if down:
                run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "netem", "loss", "100%"])
            else:
                run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root"])
            return "tc netem loss 100%"
        run(["ip", "-n", ns, "link", "set", dev, "down" if down else "up"])
        return "ip link set down"

    # -- processes of a job --
    def sweep(self, tag, prefix=False, sig=signal.SIGKILL):
        """Signals (SIGKILL unless told) every process whose environment carries SOAK_JOB=tag
        (a tag starting with it, with prefix); how many there were."""
        needle = f"SOAK_JOB={tag}{'' if prefix else chr(0)}".encode()
        n = 0
        for p in os.listdir("/proc"):
            if not p.isdigit() or int(p) == os.getpid():
                continue
            try:
                with open(f"/proc/{p}/environ", "rb") as f:
                    if needle in f.read() + b"\0":
                        os.kill(int(p), sig)
                        n += 1
            except OSError:
                pass
        return n

    def job_pids(self, tag):
        needle = f"SOAK_JOB={tag}\0".encode()
        pids = []
        for p in os.listdir("/proc"):
            if p.isdigit():
                try:
                    if needle in open(f"/proc/{p}/environ", "rb").read() + b"\0":
                        pids.append(int(p))
                except OSError:
                    pass
        return pids

    def quiet_evidence(self, f, pids):
        """What can be read without stopping anything (a ptrace stop changes what it looks at):
        each thread's state, wait channel and kernel stack, the daemons' counters twice, and the
        queues of the unix sockets in every host's namespace."""
        def read(path):
            try:
                return open(path, errors="replace").read().strip()
            except OSError as e:
                return f"({e.strerror})"
        for p in pids:
            f.write(f"--- pid {p} {read(f'/proc/{p}/comm')}\n")
            try:
                tids = sorted(os.listdir(f"/proc/{p}/task"), key=int)
            except OSError:
                continue
            for t in tids:
                st = read(f"/proc/{p}/task/{t}/stat")
                state = st.rsplit(")", 1)[-1].split()[0] if ")" in st else "?"
                f.write(f"  tid {t} {read(f'/proc/{p}/task/{t}/comm')} state {state} "
                        f"wchan {read(f'/proc/{p}/task/{t}/wchan')}\n")
                for line in read(f"/proc/{p}/task/{t}/stack").splitlines():
                    f.write(f"    {line}\n")
        for rnd in range(2):
            for i in range(len(self.ns)):
                st = self.status(i)
                f.write(f"--- daemon {i} (pid {self.sup[i].pid()}) status, sample {rnd}: {json.dumps(st)}\n")
            if rnd == 0:
                time.sleep(2)
        for ns in self.ns:
            r = subprocess.run(["ip", "netns", "exec", ns, "ss", "-x", "-a", "-p", "-n"], capture_output=True, text=True)
            f.write(f"--- unix sockets in {ns}\n" + "\n".join(
                l for l in r.stdout.splitlines() if "nicemu" in l or "dmapp" in l or "fabric" in l) + "\n")
        f.flush()

    def activity(self):
        """The daemons' work counters (remote operations, relays, BTE, MSGQ, collectives, and
        each CDM's counters, which the libraries update too), to tell a job that still moves
        data at its limit from one that stopped."""
        out = []
        for i in range(len(self.ns)):
            st = self.status(i) or {}
            out.append(json.dumps({k: st.get(k) for k in ("remote_ops", "smsg_relay", "msgq_relay", "bte",
                                                          "collective_engine", "cdms")}, sort_keys=True))
        return out

    def backtraces(self, tag, path):
        """A hung job's evidence: every process's command line, what can be read of it without
        stopping it, and, where gdb is installed, every thread's stack (the daemons' first, then
        whether the job moved on, then the ranks'), in path."""
        with open(path, "w") as f:
            ranks = self.job_pids(tag)
            daemons = [s.pid() for s in self.sup if s.pid()]
            self.quiet_evidence(f, daemons + ranks)
            if shutil.which("gdb"):
                for d in daemons:
                    r = subprocess.run(["gdb", "-p", str(d), "-batch", "-nx", "-ex", "thread apply all bt"],
                                       capture_output=True, text=True, timeout=60)
                    f.write(f"=== daemon pid {d} ({time.strftime('%H:%M:%S')})\n" +
                            "\n".join(l for l in r.stdout.splitlines() if l.startswith(("#", "Thread"))) + "\n")
                time.sleep(3)
                alive = [p for p in ranks if os.path.exists(f"/proc/{p}")]
                f.write(f"=== {time.strftime('%H:%M:%S')}: after the daemons' stacks, {len(alive)} of "
                        f"{len(ranks)} job processes remain\n")
                f.flush()
            for p in self.job_pids(tag):
                try:
                    cmd = open(f"/proc/{p}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                f.write(f"=== pid {p}: {cmd}\n")
                if shutil.which("gdb") and not re.search(r"mpiexec|hydra_pmi_proxy|setpriv|netns-rsh", cmd):
                    r = subprocess.run(["gdb", "-p", str(p), "-batch", "-nx", "-ex", "thread apply all bt"],
                                       capture_output=True, text=True, timeout=60)
                    f.write(f"({time.strftime('%H:%M:%S')})\n" +
                            "\n".join(l for l in r.stdout.splitlines() if l.startswith(("#", "Thread"))) + "\n")
        log(f"hang: stacks of the job's processes in {path}")

    def down(self):
        for jid, p in list(self.jobs_live.items()):
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
        self.sweep(self.tag + ":", prefix=True)
        for s in self.sup:
            s.stop()
        if self.made_ns:
            subprocess.run(["bash", "-c", f'. "{SRC}/tools/lib/netns-hosts.sh"; netns_hosts_down "$@"', "down"] +
                           self.ns + [self.sw], capture_output=True)
        for u in self.users:
            subprocess.run(["pkill", "-KILL", "-u", u], capture_output=True)
            if subprocess.run(["userdel", u], capture_output=True).returncode != 0:
                log(f"warning: userdel {u} failed")
            subprocess.run(["groupdel", u], capture_output=True)
        self.users = []

# ---- jobs ----

class Kind:
    def __init__(self, name, argv, ppn, pattern, limit, local=False, errors=False):
        self.name, self.argv, self.ppn, self.pattern, self.limit = name, argv, ppn, pattern, limit
        self.local = local    # one host, its own ranks (gni_bench forks them)
        self.errors = errors  # recovers transient error CQEs (dmapp reposts PUT/GET): errors injected too


class Job:
    pass


def start_job(c, k, jid, user, rng):
    j = Job()
    j.id, j.kind, j.user = jid, k, user
    j.killwait = False  # a cancel that needed the SIGKILL after KillWait
    j.tag = f"{c.tag}:{jid}"
    j.cred = c.cred_issue(user)
    j.log = os.path.join(c.out, "jobs", f"{jid:05d}-{k.name}.log")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SOAK_USER": user, "SOAK_JOB": j.tag}
    if k.local:
        j.host = rng.randrange(len(c.ns))
        argv = ["ip", "netns", "exec", c.ns[j.host], "setpriv", "--reuid", user, "--regid", user, "--init-groups",
                "env", f"NICEMU_RUNDIR={c.rundir[j.host]}", f"NICEMU_NODE={j.host}"] + k.argv
        env.update(j.cred)
    else:
        hosts = range(len(c.ns))
        j.host = None
        n = len(hosts) * k.ppn
        argv = ["ip", "netns", "exec", c.sw, "mpiexec.hydra", "-launcher", "rsh", "-launcher-exec", c.rsh, "-iface",
                "br0", "-hosts", ",".join(c.net + str(i + 1) for i in hosts), "-n", str(n), "-ppn", str(k.ppn),
                "-genvnone", "-genv", "PMI_GNI_PTAG", j.cred["PMI_GNI_PTAG"], "-genv", "PMI_GNI_COOKIE",
                j.cred["PMI_GNI_COOKIE"], "-genv", "SOAK_JOB", j.tag] + k.argv
    j.f = open(j.log, "wb")
    j.t0 = time.time()
    j.p = subprocess.Popen(argv, stdout=j.f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                           start_new_session=True)
    c.jobs_live[jid] = j.p
    return j


def wait_job(c, j, limit):
    """Waits up to limit seconds from the job's start. Sets j.rc, j.wall, j.hang."""
    j.hang = False
    j.busy = False
    try:
        j.rc = j.p.wait(max(0.1, limit - (time.time() - j.t0)))
    except subprocess.TimeoutExpired:
        j.hang = True
        # Slow or stopped? Counters that move over 2 s mean the job was still working.
        a0 = c.activity()
        time.sleep(2)
        j.busy = c.activity() != a0
        c.backtraces(j.tag, j.log + ".hang")
        try:
            os.killpg(j.p.pid, signal.SIGKILL)
        except OSError:
            pass
        j.rc = j.p.wait()
    j.t_end = time.time()
    j.wall = j.t_end - j.t0
    try:
        os.killpg(j.p.pid, signal.SIGKILL)  # a launcher that exited may leave its group behind
    except OSError:
        pass
    j.leftover = c.sweep(j.tag)
    c.jobs_live.pop(j.id, None)
    j.f.close()
    c.cred_revoke(j.cred, j.user)
    out = open(j.log, errors="replace").read()
    want, pat = j.kind.pattern
    j.verified = j.rc == 0 and not j.hang and len(re.findall(pat, out)) >= want
    m = WRONG_DATA.search(out)
    j.wrong = m.group(0) if m else None


def outcome(j):
    if j.hang:
        return "slow" if j.busy else "hang"
    if j.wrong:
        return "wrong-data"
    if j.verified:
        return "verified"
    return "error" if j.rc != 0 else "unverified"


def fmt_table(rows, head):
    w = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    line = lambda r: "  " + "  ".join(str(x).rjust(n) for x, n in zip(r, w))
    return "\n".join([line(head)] + [line(r) for r in rows])


# What both commands' --help print after their own part.
CLUSTER_DOC = """tools/soak and tools/chaos both build HOSTS network namespaces joined by veth pairs
to a bridge in a further namespace (tools/lib/netns-hosts.sh), one emulated node per host on the UDP fabric, each daemon
started as nicemu@.service starts it (`nicemu --config FILE --node N`) and kept running by a
supervisor loop that restarts it whenever it exits, as Restart=always with RestartSec=1s
would (there is no systemd here). Jobs are the project's own verifying test programs
(fabric_rma, fabric_smsg, fabric_dgram, dmapp_suite, dmapp_histogram, ce_conformance,
gni_ring across the hosts under MPICH's Hydra; gni_bench's MSGQ stream on one host), each run
as one of two throw-away Unix users with a credential issued for that user and revoked when
the job ends, as a launcher does.

Needs root (namespaces, users), ip, tc, useradd and mpiexec.hydra; exits 77 otherwise.
Every process, namespace and user it made is removed on success, failure and signals.
Exit: 0 every check passed, 1 a check failed, 2 bad arguments, 77 cannot run here."""


def main(name, doc, add_args, body):
    """The command line and run of tools/`name`: the shared options, add_args(ap) for its own,
    then the cluster up, body(cluster, args) for the exit status, and the cluster down, also
    on failure and signals."""
    ap = argparse.ArgumentParser(prog=name, description=doc + "\n\n" + CLUSTER_DOC,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(SRC, "build"), help="meson build directory (default: build)")
    ap.add_argument("--hosts", type=int, default=2, help="network-namespace hosts, one node each (2..8, default 2)")
    ap.add_argument("--seed", type=int, help="seed of every random choice (default: drawn and printed)")
    ap.add_argument("--out", help="directory for logs and reports (default: a new one in $TMPDIR, kept)")
    ap.add_argument("--log-level", default="warn", help="daemons' log_level (default warn)")
    ap.add_argument("--skip", type=lambda s: s.split(","), default=[],
                    help="job kinds left out, comma-separated (rma, rma2, smsg, dgram, dmapp, histogram, ce, ring, msgq)")
    add_args(ap)
    a = ap.parse_args()
    if not 2 <= a.hosts <= 8:
        ap.error("--hosts must be 2..8")
    if a.seed is None:
        a.seed = random.SystemRandom().randrange(1 << 31)
    a.build = os.path.abspath(a.build)
    if a.out is None:
        a.out = tempfile.mkdtemp(prefix=f"nicemu-{name}.", dir=os.environ.get("TMPDIR", "/tmp"))
    a.out = os.path.abspath(a.out)
    c = Cluster(a)

    def on_signal(sig, _):
        raise SystemExit(128 + sig)

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, on_signal)
    try:
        c.check_env()
        log(f"{name}: seed {a.seed}, {a.hosts} hosts, output {a.out}; daemons kept up "
            f"by a supervisor loop (Restart=always, RestartSec={RESTART_SEC:.0f}s)")
        c.up()
        rc = body(c, a)
    except Skip as e:
        log(f"SKIP: {e}")
        rc = 77
    except (RuntimeError, subprocess.SubprocessError, OSError) as e:
        log(f"FAIL: {e}")
        rc = 1
    finally:
        c.down()
        log(f"cleaned up; logs in {a.out}")
    return rc

