#!/usr/bin/env python3
"""Writes the recorded /proc and /sys trees the doctor's unit tests read (run from this
directory; the trees are committed). Lines follow the kernel's formats exactly, taken from a
6.x VM and edited to the case: `t0/` is the first snapshot (schedstat, interrupts), `t1/` the
second and every static file."""
import os, shutil

def stat(pid, comm, state="S", ppid=1, processor=0, rt_prio=0, policy=0):
    # Fields 3..52 of /proc/PID/stat; 19 nice, 39 processor, 40 rt_priority, 41 policy.
    f = [state, str(ppid), str(pid), str(pid), "0", "-1", "4194304", "100", "0", "0", "0", "0", "0",
         "0", "0", "20", "0", "1", "0", "2376208", "3133440", "386", "18446744073709551615",
         "94590150725632", "94590150745513", "140730520716672", "0", "0", "0", "0", "0", "0", "0",
         "0", "0", "17", str(processor), str(rt_prio), str(policy), "0", "0", "0", "94590150761520",
         "94590150763136", "94591176044544", "140730520722114", "140730520722134",
         "140730520722134", "140730520723435", "0"]
    f[16] = "0"  # nice (field 19)
    return f"{pid} ({comm}) " + " ".join(f) + "\n"

def w(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.write(text)

def thread(base, pid, tid, comm, sched, cpus="0", **kw):
    d = f"{base}/proc/{pid}/task/{tid}"
    w(f"{d}/stat", stat(tid, comm, **kw))
    w(f"{d}/schedstat", "%d %d %d\n" % sched)
    w(f"{d}/status", f"Name:\t{comm}\nCpus_allowed_list:\t{cpus}\n")

def process(base, pid, comm, ppid=1, cgroup="/system.slice/server.service"):
    w(f"{base}/proc/{pid}/stat", stat(pid, comm, ppid=ppid))
    w(f"{base}/proc/{pid}/cgroup", f"0::{cgroup}\n")

TCP_HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
def listen_line(i, port, inode):
    return f"   {i}: 0100007F:{port:04X} 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 {inode} 1 000000007cce09f4 100 0 0 10 0\n"

def sockets(base, pid, inodes, table):
    for n, inode in enumerate(inodes):
        os.makedirs(f"{base}/proc/{pid}/fd", exist_ok=True)
        os.symlink(f"socket:[{inode}]", f"{base}/proc/{pid}/fd/{n + 3}")
    w(f"{base}/proc/{pid}/net/tcp", TCP_HEADER + table)

def interrupts(counts):
    s = "           CPU0       CPU1       \n"
    s += " 24:          1          0  IO-APIC   5-edge      ACPI:Ged\n"
    for irq, (c0, c1, name) in counts.items():
        s += f" {irq}: {c0:>10} {c1:>10}  PCI-MSIX-0000:00:04.0   1-edge      {name}\n"
    s += "LOC:   86313410   83262390   Local timer interrupts\n"
    return s

def common(base, nodes, governor, idle_states, rt_runtime):
    w(f"{base}/sys/devices/system/cpu/online", "0-1\n")
    for cpu in (0, 1):
        if governor:
            w(f"{base}/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor", governor + "\n")
        for k, (name, lat, disabled) in enumerate(idle_states):
            d = f"{base}/sys/devices/system/cpu/cpu{cpu}/cpuidle/state{k}"
            w(f"{d}/name", name + "\n"); w(f"{d}/latency", f"{lat}\n"); w(f"{d}/disable", f"{disabled}\n")
    w(f"{base}/sys/devices/system/cpu/cpuidle/current_driver", "none\n")
    for n, cpus in enumerate(nodes):
        w(f"{base}/sys/devices/system/node/node{n}/cpulist", cpus + "\n")
    w(f"{base}/proc/sys/kernel/sched_rt_runtime_us", f"{rt_runtime}\n")
    w(f"{base}/proc/sys/kernel/sched_rt_period_us", "1000000\n")

def both(case, fn):
    for t in ("t0", "t1"):
        fn(f"{case}/{t}", t == "t1")

shutil.rmtree("contended", ignore_errors=True)
shutil.rmtree("healthy", ignore_errors=True)
shutil.rmtree("workers", ignore_errors=True)
shutil.rmtree("bare", ignore_errors=True)
shutil.rmtree("idle-pressure", ignore_errors=True)

# Everything wrong: a 3-worker CFS server on CPU 0 with a spinner beside it, two SO_REUSEPORT
# sockets, a busy NIC IRQ on CPU 0, powersave with a deep C-state, memory on the other node,
# one RT thread under the default RT budget.
def contended(base, late):
    ms = 1_000_000
    process(base, 100, "server")
    for tid in (100, 101, 102):
        cpu, delay, slices = (300 * ms, 600 * ms, 400) if late else (0, 0, 0)
        thread(base, 100, tid, "server", (1000 * ms + cpu, 50 * ms + delay, 1000 + slices), state="R")
    thread(base, 100, 103, "server-rt", (5 * ms, 0, 10), policy=1, rt_prio=10)
    process(base, 200, "spinner", cgroup="/user.slice")
    thread(base, 200, 200, "spinner", (5000 * ms + (900 * ms if late else 0), 10 * ms, 50), state="R")
    process(base, 300, "irqbalance", cgroup="/system.slice/irqbalance.service")
    thread(base, 300, 300, "irqbalance", (ms, 0, 5))
    w(f"{base}/proc/interrupts", interrupts({30: (100_000 + (20_000 if late else 0), 5, "virtio1-input.0")}))
    w(f"{base}/proc/pressure/cpu", "some avg10=35.10 avg60=30.02 avg300=12.00 total=912871511\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    if late:
        sockets(base, 100, [5001, 5002], listen_line(0, 8080, 5001) + listen_line(1, 8080, 5002))
        w(f"{base}/proc/100/numa_maps", "55c11b6c0000 default file=/srv/server mapped=2 N0=20 kernelpagesize_kB=4\n7f0000000000 default anon=900 dirty=900 N1=900 kernelpagesize_kB=4\n")
        w(f"{base}/proc/irq/30/smp_affinity_list", "0\n")
        common(base, ["0", "1"], "powersave", [("POLL", 0, 0), ("C6", 100, 0)], 950000)
both("contended", contended)

# Nothing wrong: one CFS thread alone on CPU 0, one listening socket, one NUMA node,
# performance governor, only POLL, few interrupts, no RT threads.
def healthy(base, late):
    ms = 1_000_000
    process(base, 100, "server")
    thread(base, 100, 100, "server", (1000 * ms + (400 * ms if late else 0), 2 * ms + (ms if late else 0), 1000 + (500 if late else 0)))
    process(base, 200, "idle-builder", cgroup="/user.slice")
    # SCHED_IDLE work on the same CPU does not delay a normal thread.
    thread(base, 200, 200, "idle-builder", (9000 * ms + (500 * ms if late else 0), 0, 10), state="R", policy=5)
    w(f"{base}/proc/interrupts", interrupts({30: (100_000 + (50 if late else 0), 5, "virtio1-input.0")}))
    w(f"{base}/proc/pressure/cpu", "some avg10=0.10 avg60=0.05 avg300=0.01 total=1287\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    if late:
        sockets(base, 100, [5001], listen_line(0, 8080, 5001))
        w(f"{base}/proc/100/numa_maps", "55c11b6c0000 default file=/srv/server mapped=2 N0=20 kernelpagesize_kB=4\n")
        w(f"{base}/proc/irq/30/smp_affinity_list", "1\n")
        common(base, ["0-1"], "performance", [("POLL", 0, 0)], 950000)
        cg = f"{base}/sys/fs/cgroup/unified"
        w(f"{cg}/cgroup.procs", "1\n")
        w(f"{cg}/system.slice/server.service/cgroup.procs", "100\n")
        w(f"{cg}/system.slice/server.service/cpu.pressure", "some avg10=0.42 avg60=0.30 avg300=0.10 total=4242\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
both("healthy", healthy)

# An nginx-like master with two workers sharing one listening socket.
def workers(base, late):
    ms = 1_000_000
    process(base, 100, "nginx")
    thread(base, 100, 100, "nginx", (10 * ms, 0, 10), cpus="0-1")
    for pid in (101, 102):
        process(base, pid, "nginx", ppid=100)
        thread(base, pid, pid, "nginx", (100 * ms + (50 * ms if late else 0), 0, 100 + (50 if late else 0)), ppid=100, cpus="0-1")
    w(f"{base}/proc/interrupts", interrupts({}))
    if late:
        for pid in (100, 101, 102):
            sockets(base, pid, [7001], listen_line(0, 80, 7001))
        common(base, ["0-1"], None, [], 950000)
both("workers", workers)

# A VM that exposes no cpufreq/cpuidle and no PSI; RT budget unlimited; one FIFO thread.
def bare(base, late):
    process(base, 100, "server")
    thread(base, 100, 100, "server", (1000 + (5000 if late else 0), 0, 1 + (5 if late else 0)), policy=1, rt_prio=50)
    w(f"{base}/proc/interrupts", interrupts({}))
    if late:
        common(base, ["0-1"], None, [], -1)
both("bare", bare)

# The healthy node with SCHED_IDLE builds keeping both CPUs busy: CPU pressure is high (their
# tasks wait), but nothing outside SCHED_IDLE is busy, so nothing a service runs waits.
def idle_pressure(base, late):
    ms = 1_000_000
    healthy(base, late)
    process(base, 201, "idle-builder", cgroup="/user.slice")
    thread(base, 201, 201, "idle-builder", (8000 * ms + (500 * ms if late else 0), 0, 10), state="R", policy=5, processor=1, cpus="1")
    w(f"{base}/proc/pressure/cpu", "some avg10=99.73 avg60=98.99 avg300=90.00 total=912871511\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
both("idle-pressure", idle_pressure)
