#!/usr/bin/env python3
"""Instructions Redis spends per notification in a script, counted by callgrind.

    python3 scripts/script_cost.py settle [--batch 16] [--n 20000] [--conflict]
    python3 scripts/script_cost.py claim  [--batch 16] [--n 20000]
    python3 scripts/script_cost.py enqueue [--batch 16] [--n 20000]

Starts redis-server under `valgrind --tool=callgrind` on a free port, stores N
notifications in the state a script expects (in flight for `settle`, due for `claim`,
nothing for `enqueue`; registered and never attempted, so with no state record, as most
are), and pipes N / BATCH calls of the script (lua/common.lua in front, as postback
loads it).
Then it does the same with a script that returns at once, and prints the difference per
notification. Instruction counts do not depend on what else the machine is doing, so two
versions of a script can be compared on a busy machine; wall time cannot.

`settle` runs commit.lua as a settle does: the record after the attempt, as postback
works it out from the record its claim read (src/lifecycle), so the script only checks
and writes it; `--conflict` leaves the expected record out, so that the script answers
with how the notification is instead (the first of the two calls a settle takes when a
cancel came meanwhile).
"""

import argparse
import os
import re
import socket
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARD = ["due", "inflight", "dead", "jobs", "state", "history", "done", "counters", "tenants"]
KEYS = ["{postback:0}:" + k for k in SHARD]
SCHEDULE = "15s,3m,10m,30m,30m,1h,2h,6h,15h"
NOW = "1795384073315"
# As postback hands it to enqueue.lua (src/store/spec.rs); stored with the
# registration's line in front.
SPEC = '{"url":"http://127.0.0.1:9/cb"}\n{"i":1}'


def base36(n):
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, d = divmod(n, 36)
        out = digits[d] + out
        if n == 0:
            return out


STORED_SPEC = "v3 " + base36(int(NOW)) + " 0 " + SCHEDULE + "\n" + SPEC
# The schedule's reference (src/store/spec.rs, schedule_reference); any 4 digits serve.
REFERENCE = "bnch"


def state(name, lease, attempts=0, at="next_at"):
    """A state record, in the order of fresh_state in lua/common.lua."""
    return (
        '{"state":"%s","attempts":%d,"lease":%d,"max_attempts":10,"schedule":"%s",'
        '"created_at":%s,"%s":%s}' % (name, attempts, lease, SCHEDULE, NOW, at, NOW)
    )


def resp(args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


def notification_id(i):
    return "ntf_0_0352MTUd4Uo7%010d" % i


def setup(kind, i):
    """Commands that put notification i where the script expects it."""
    if kind == "enqueue":
        return []
    nid = notification_id(i)
    cmds = [resp(["HSET", KEYS[3], nid, STORED_SPEC])]
    if kind == "settle":
        cmds.append(resp(["ZADD", KEYS[1], NOW, nid]))
    else:
        cmds.append(resp(["ZADD", KEYS[0], "1000", nid]))
    return cmds


def call(kind, sha, first, batch, conflict):
    """One script call for notifications first .. first + batch."""
    if kind == "claim":
        keys = KEYS + ["{postback:0}:claim:bench"]
        return resp(["EVALSHA", sha, str(len(keys))] + keys + [str(batch), "60000", "0"])
    args = ["EVALSHA", sha, str(len(KEYS))] + KEYS
    if kind == "enqueue":
        args = ["EVALSHA", sha, str(len(KEYS) + 1)] + KEYS + ["{postback:0}:schedules"]
        args += ["postback:wake"]
        for i in range(first, first + batch):
            args += [notification_id(i), SPEC, SCHEDULE, REFERENCE, "0", "0", "0", "1", "",
                     "", "0"]
        return resp(args)
    args += ["postback:wake", "2592000000", "1000000", "604800000", str(2 * batch + 16)]
    entry = '{"at":%d,"status":200,"error":null,"duration_ms":3,"response":"ok"}' % (int(NOW) - 3)
    for i in range(first, first + batch):
        expected = "" if conflict else state("scheduled", 0)
        after = state("delivered", 1, attempts=1, at="finished_at")
        args += [notification_id(i), expected, "inflight", NOW, after, "done", NOW, entry, "", "",
                 "0", "0"]
    return resp(args)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def instructions(kind, body, n, batch, conflict):
    """Total instructions of a redis-server that ran the setup and the calls of `body`."""
    port = str(free_port())
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        server = subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out,
             "redis-server", "--port", port, "--save", "", "--appendonly", "no",
             "--dir", tmp],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        cli = ["redis-cli", "-p", port]
        while subprocess.run(cli + ["ping"], capture_output=True).stdout.strip() != b"PONG":
            time.sleep(0.2)
        sha = subprocess.run(cli + ["script", "load", body], capture_output=True,
                             check=True, text=True).stdout.strip()
        stream = []
        for first in range(0, n, batch):
            for i in range(first, first + batch):
                stream.extend(setup(kind, i))
            stream.append(call(kind, sha, first, batch, conflict))
        subprocess.run(cli + ["--pipe"], input=b"".join(stream), check=True,
                       capture_output=True)
        subprocess.run(cli + ["shutdown", "nosave"], capture_output=True)
        server.wait()
        with open(out) as f:
            return next(int(line.split()[1]) for line in f if line.startswith("totals:"))


def script_constants():
    """The constants postback writes in front of every script (`script_constants` in
    src/store/redis_store.rs), read from the Rust constants they come from."""
    def const(path, name):
        text = open(os.path.join(ROOT, path)).read()
        value = re.search(r"const " + name + r": [^=]+= ([^;]+);", text).group(1)
        return value.strip('"')
    layout = const("src/store/spec.rs", "VERSION")
    waiting = eval(const("src/lifecycle/record.rs", "WAITING_OFFSET_MS"))
    window = eval(const("src/store/tenant_counts.rs", "OUTCOME_WINDOW_MS"))
    windows = const("src/store/tenant_counts.rs", "OUTCOME_WINDOWS")
    shared = const("src/store/redis_store/schedules.rs", "MAX_SHARED").replace("_", "")
    return (f"local LAYOUT = '{layout}'\nlocal WAITING = {waiting}\n"
            f"local WINDOW_MS, WINDOWS = {window}, {windows}\n"
            f"local MAX_SHARED_SCHEDULES = {shared}\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("script", choices=["settle", "claim", "enqueue"])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--conflict", action="store_true",
                        help="settle with no expected record: the script answers with the stored one")
    a = parser.parse_args()
    common = script_constants() + open(os.path.join(ROOT, "lua", "common.lua")).read()
    name = "commit" if a.script == "settle" else a.script
    real = common + open(os.path.join(ROOT, "lua", name + ".lua")).read()
    empty = common + "return {0, 0}"
    spent = instructions(a.script, real, a.n, a.batch, a.conflict)
    base = instructions(a.script, empty, a.n, a.batch, a.conflict)
    print(f"{a.script}: {(spent - base) / a.n:,.0f} instructions per notification "
          f"(batches of {a.batch}, {a.n:,} notifications)")


if __name__ == "__main__":
    main()
