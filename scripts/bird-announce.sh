#!/bin/sh
# Announces a VIP through BIRD only while switchyard says it is ready, and
# withdraws it as soon as it is not (drained: `switchyard ctl node drain`;
# stopped: nothing answers). Run one per node, beside BIRD (docs/cluster.md).
#
#   bird-announce.sh BIRD_SOCKET PROTOCOL [READYZ_URL] [INTERVAL]
#
# PROTOCOL is the BIRD protocol that originates the VIP/32 (a `static`
# protocol exported to the BGP sessions); it is enabled while ready and
# disabled otherwise, so BGP withdraws the route from every peer.
set -u
sock=$1
proto=$2
url=${3:-http://127.0.0.1:9090/readyz}
every=${4:-0.2}
state=""
while :; do
  if curl -fs -m 1 -o /dev/null "$url"; then want=enable; else want=disable; fi
  if [ "$want" != "$state" ] && birdc -s "$sock" "$want" "$proto" >/dev/null 2>&1; then
    state=$want
    echo "bird-announce: $proto ${want}d ($url)"
  fi
  sleep "$every"
done
