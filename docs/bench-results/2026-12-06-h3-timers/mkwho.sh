#!/bin/bash
BIN=$1
m() { nm $BIN | grep " [Tt] " | awk '{print $3}' | grep -F -- "$1" | head -1; }
ED=$(m 'quinn..endpoint..EndpointDriver$u20$as$u20$core..future'); CD=$(m 'quinn..connection..ConnectionDriver$u20$as$u20$core..future'); H3R=$(m '_ZN10switchyard5proxy14client_h3_conn3run28_$u7b$$u7b$closure$u7d$$u7d$17h'); H3Q=$(m '_ZN10switchyard5proxy14client_h3_conn3run28_$u7b$$u7b$closure$u7d$$u7d$28_'); H2R=$(m '_ZN10switchyard5proxy14client_h2_conn3run28_'); H2S=$(m '_ZN10switchyard5proxy14client_h2_conn11stream_task28_')
q() { printf '"%s"' "$1"; }
cat <<EOT
uprobe:$BIN:$(q $ED) /pid == \$1/ { @endpoint_driver = count(); }
uprobe:$BIN:$(q $CD) /pid == \$1/ { @connection_driver = count(); }
uprobe:$BIN:$(q $H3R) /pid == \$1/ { @h3_conn_loop = count(); }
uprobe:$BIN:$(q $H3Q) /pid == \$1/ { @h3_request_task = count(); }
uprobe:$BIN:$(q $H2R) /pid == \$1/ { @h2_conn_task = count(); }
uprobe:$BIN:$(q $H2S) /pid == \$1/ { @h2_stream_task = count(); }
uprobe:$BIN:_ZN5tokio7runtime4task3raw4poll17h* /pid == \$1/ { @task_polls = count(); }
tracepoint:sched:sched_switch /args->prev_pid != 0 && pid == \$1 && args->prev_state == 1/ { @sleeps = count(); }
interval:s:8 { exit(); }
EOT
