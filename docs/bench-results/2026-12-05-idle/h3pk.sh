#!/bin/bash
W=/tmp/s48/all/report/work
export PATH=/opt/switchyard-bench-peers/bin:$PATH
T=$(mktemp -d); cp -r $W/switchyard $T/
sed -i 's/^  resumption = true$/  resumption = true\n  alpn = ["h2", "http\/1.1"]/' $T/switchyard/switchyard.toml
python3 -c "import sys; sys.path.insert(0, '/work/main/scripts'); import h3_configs; h3_configs.switchyard('$T/switchyard/switchyard.toml')"
taskset -c 1 /work/main/target/release/switchyard-bench origin --listen 127.0.0.1:27081 --listen 127.0.0.1:27082 >/dev/null 2>&1 & O=$!
taskset -c 0 ${SY:-/work/main/target/release/switchyard} run -c $T/switchyard/switchyard.toml >/dev/null 2>&1 & P=$!
sleep 3
taskset -c 1 oha --http-version 3 --insecure --no-tui -c 20 -p 10 -n 400 https://127.0.0.1:26084/size/1024 >/dev/null 2>&1
strace -f -e trace=sendmsg,sendmmsg,recvmsg,recvmmsg,sendto -o /tmp/h3pk.strace -p $P & S=$!
sleep 0.5
taskset -c 1 oha --http-version 3 --insecure --no-tui -c 20 -p 10 -n ${N:-2000} https://127.0.0.1:26084/size/1024 > /tmp/h3pk.oha 2>&1
kill -INT $S; wait $S 2>/dev/null
kill $P $O; wait 2>/dev/null
rm -rf $T
python3 - <<'PY'
import re
calls={}; segs=0; bytes_=0; gso=0
for l in open('/tmp/h3pk.strace'):
    m=re.search(r'\b(sendmsg|recvmsg|sendmmsg|recvmmsg|sendto)\(',l)
    if not m: continue
    calls[m.group(1)]=calls.get(m.group(1),0)+1
    if m.group(1)=='sendmsg':
        r=re.search(r'= (\d+)$',l.strip())
        n=int(r.group(1)) if r else 0
        bytes_+=n
        g=re.search(r'UDP_SEGMENT, cmsg_data=\[?(\d+)',l)
        if g: gso+=1; segs+= -(-n//int(g.group(1)))
        else: segs+=1 if n else 0
print(calls, 'sent bytes', bytes_, 'datagrams', segs, 'gso msgs', gso)
PY
grep -m1 "Requests/sec\|Success rate" /tmp/h3pk.oha
