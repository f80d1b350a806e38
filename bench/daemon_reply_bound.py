#!/usr/bin/env python3
"""Peak RSS of agentloopd under a 512 MiB reply (issue 15).

Starts agentloop-mockllm with a ~530 MB reply and an agentloopd on a private
socket and state dir, creates a session (with the given limits), sends one
turn, waits for its end, and reads the daemon's VmHWM. Reference in the same
run: the daemon's VmHWM after a one-word reply.

    bench/daemon_reply_bound.py BUILD_DIR [LIMITS_JSON]
"""
import json, os, socket, subprocess, sys, tempfile, time

build = sys.argv[1] if len(sys.argv) > 1 else "build"
limits = json.loads(sys.argv[2]) if len(sys.argv) > 2 else None
tmp = tempfile.mkdtemp()
x = "x" * 1024
big = "responses:\n  - reply:\n      content:\n" + "".join(
    '        - repeat_text: {count: 30000, text: "%s"}\n' % x for _ in range(16))
small = "responses:\n  - reply: {content: [{text: hi}]}\n"
procs = []


def mock(name, text):
    path = os.path.join(tmp, name + ".yaml")
    open(path, "w").write(text)
    pf = os.path.join(tmp, name + ".port")
    procs.append(subprocess.Popen([build + "/agentloop-mockllm", "--scenario",
                                   path, "--port-file", pf, "-q"]))
    while not (os.path.exists(pf) and open(pf).read().strip()):
        time.sleep(0.05)
    return int(open(pf).read())


def hwm(pid):
    for line in open("/proc/%d/status" % pid):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024.0
    return 0.0


def run(sock, port, ident):
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock)
    f = s.makefile("rwb")
    n = [0]

    def call(method, params):
        n[0] += 1
        f.write((json.dumps({"jsonrpc": "2.0", "id": n[0], "method": method,
                             "params": params}) + "\n").encode())
        f.flush()
        while True:
            m = json.loads(f.readline())
            if m.get("id") == n[0]:
                return m

    call("initialize", {"client": {"name": "bench"}, "protocol_version": 1})
    p = {"cwd": tmp, "base_url": "http://127.0.0.1:%d" % port}
    if limits:
        p["limits"] = limits
    sid = call("session/create", p)["result"]["session"]
    # Not subscribed: 64 MiB of deltas would only measure this client.
    call("turn/send", {"session": sid, "input": ident})
    while True:
        time.sleep(0.1)
        ss = call("session/list", {})["result"]["sessions"]
        if not [x for x in ss if x["session"] == sid and x["running"]]:
            break
    s.close()
    return {"type": "ended"}


try:
    pbig, psmall = mock("big", big), mock("small", small)
    sock = os.path.join(tmp, "d.sock")
    env = dict(os.environ, ANTHROPIC_API_KEY="k", XDG_STATE_HOME=tmp)
    d = subprocess.Popen([build + "/agentloopd", "--foreground", "--socket",
                          sock, "--state-dir", os.path.join(tmp, "state"),
                          "--model", "m"], env=env, stderr=subprocess.DEVNULL)
    procs.append(d)
    while not os.path.exists(sock):
        time.sleep(0.05)
    e = run(sock, psmall, "small")
    print("one-word reply: %s, daemon VmHWM %.1f MiB" % (e["type"], hwm(d.pid)))
    e = run(sock, pbig, "big")
    print("512 MiB reply (limits %s): %s %s, daemon VmHWM %.1f MiB" % (
        json.dumps(limits), e["type"], e.get("message", "")[:60], hwm(d.pid)))
finally:
    for p in procs:
        p.kill()
    subprocess.call(["rm", "-rf", tmp])
