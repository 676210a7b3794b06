#!/bin/bash
cd /work/main
for r in 1 2 3; do
  for b in base gso; do
    SWITCHYARD=/tmp/x/$b/switchyard CASES=ka TARGETS=sy bash scripts/h3-bench.sh /tmp/s52/all/work 1 | sed "s/^round 1/round $r $b/"
  done
done
