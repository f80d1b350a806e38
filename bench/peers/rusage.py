#!/usr/bin/env python3
"""rusage.py OUT.json CMD [ARGS...]

Runs CMD (stdin/stdout/stderr inherited) and writes its resource usage to
OUT.json: user/sys CPU in microseconds from wait4() (microsecond resolution,
unlike /usr/bin/time's centiseconds) and peak RSS (ru_maxrss, KiB) of that one
child process. Exits with the child's status.
"""
import json, os, sys, time

out = sys.argv[1]
t0 = time.monotonic()
pid = os.fork()
if pid == 0:
    try:
        os.execvp(sys.argv[2], sys.argv[2:])
    finally:
        os._exit(127)
_, status, ru = os.wait4(pid, 0)
wall = time.monotonic() - t0
with open(out, "w") as f:
    json.dump({"user_us": round(ru.ru_utime * 1e6), "sys_us": round(ru.ru_stime * 1e6),
               "cpu_us": round((ru.ru_utime + ru.ru_stime) * 1e6),
               "maxrss_kb": ru.ru_maxrss, "wall_s": round(wall, 3)}, f)
sys.exit(os.waitstatus_to_exitcode(status))
