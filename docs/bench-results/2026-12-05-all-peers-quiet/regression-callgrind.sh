set -u
B=$1; OUT=$2
CONF=/tmp/s48/all/report/work
taskset -c 1 /work/main/target/release/switchyard bench origin --listen 127.0.0.1:27081 --listen 127.0.0.1:27082 >/dev/null 2>&1 & O=$!
taskset -c 0 valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=$OUT $B run -c $CONF/switchyard/switchyard.toml >/dev/null 2>&1 & P=$!
for _ in $(seq 300); do (exec 3<>/dev/tcp/127.0.0.1/26080) 2>/dev/null && break; sleep 0.2; done
sleep 1
callgrind_control -i on $P >/dev/null 2>&1
taskset -c 1 h2load --h1 -c 10 -n 4000 http://127.0.0.1:26080/size/128 >/dev/null 2>&1
callgrind_control -i off $P >/dev/null 2>&1
kill -TERM $P; wait $P; kill $O
