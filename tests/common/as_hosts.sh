#!/usr/bin/env bash
# Runs <program> as <hosts> hosts of <ranks> ranks each on this machine: one `deepspeed --no_ssh --node_rank R` per
# host, as a user starts each host of a cluster by hand, so each rank sees a multi-host job's RANK, LOCAL_RANK and
# LOCAL_WORLD_SIZE (the traffic stays on loopback). Fails when any host's launcher fails; a host left waiting for
# the others gives up after 300 s.
#   usage: as_hosts.sh <deepspeed> <hosts> <ranks per host> <port> <program> [args...]
set -uo pipefail
ds=$1 hosts=$2 ranks=$3 port=$4
shift 4
# The layout, for tests that must check they really run as these hosts rather than skip.
export DS_TEST_HOSTS=$hosts DS_TEST_RANKS_PER_HOST=$ranks
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for h in $(seq 0 $((hosts - 1))); do echo "host$h slots=$ranks" >> "$dir/hostfile"; done
pids=()
for h in $(seq 1 $((hosts - 1))); do
  timeout 300 "$ds" --hostfile "$dir/hostfile" --no_ssh --node_rank "$h" --master_addr 127.0.0.1 \
    --master_port "$port" "$@" > "$dir/host$h.log" 2>&1 &
  pids+=($!)
done
timeout 300 "$ds" --hostfile "$dir/hostfile" --no_ssh --node_rank 0 --master_addr 127.0.0.1 --master_port "$port" "$@"
status=$?
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || { status=1; echo "--- host $((i + 1)) ---"; cat "$dir/host$((i + 1)).log"; }
done
exit $status
