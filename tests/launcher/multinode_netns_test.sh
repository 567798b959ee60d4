#!/usr/bin/env bash
# Multi-node launch across real (network-namespace) hosts: two namespaces joined by a veth link,
# each with its own address and an sshd bound to it (key-only auth, keys made here), and the
# `deepspeed` launcher started in the first one with a hostfile naming both addresses. The file
# system is shared, as a cluster's home directory would be, so both "hosts" run the same binaries.
#   usage: multinode_netns_test.sh <case> <bin-dir> <configs-dir> <port>
#   cases: pdsh ssh openmpi kill_pdsh kill_ssh kill_launcher kill_launcher_ssh hpz unreachable
# Exits 77 (skipped) with the reason when this machine cannot build the hosts (not root, no
# namespaces, sshd/pdsh/mpirun missing).
set -uo pipefail
case_name=$1 bin=$2 configs=$3 port=$4

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root to create network namespaces"
for tool in ip /usr/sbin/sshd ssh ssh-keygen pdsh mpirun; do
  command -v "$tool" > /dev/null || skip "$tool is not installed (scripts/setup.sh installs it)"
done

work=$(mktemp -d)
tag=$(printf '%x%x' $$ $((RANDOM % 256)))
ns_a=dsa$tag ns_b=dsb$tag
log=$work/log
cleanup() {
  for ns in $ns_a $ns_b; do
    for pid in $(ip netns pids "$ns" 2> /dev/null); do kill -9 "$pid" 2> /dev/null; done
    ip netns del "$ns" 2> /dev/null
  done
  rm -rf "$work"
}
trap cleanup EXIT

ip netns add $ns_a 2> "$log" || skip "cannot create a network namespace: $(head -1 "$log")"
ip netns add $ns_b || exit 1
ip link add va$tag type veth peer name vb$tag || skip "cannot create a veth pair"
ip link set va$tag netns $ns_a && ip link set vb$tag netns $ns_b || exit 1
ip -n $ns_a addr add 10.77.0.1/24 dev va$tag && ip -n $ns_b addr add 10.77.0.2/24 dev vb$tag || exit 1
for ns in $ns_a $ns_b; do ip -n $ns link set lo up || exit 1; done
ip -n $ns_a link set va$tag up && ip -n $ns_b link set vb$tag up || exit 1

mkdir -p /run/sshd "$work/bin"  # /run/sshd: sshd's privilege separation directory
ssh-keygen -q -t ed25519 -N '' -f "$work/host_key" && ssh-keygen -q -t ed25519 -N '' -f "$work/user_key" || exit 1
cp "$work/user_key.pub" "$work/authorized_keys"
for i in 1 2; do
  ns=$([ $i = 1 ] && echo $ns_a || echo $ns_b)
  cat > "$work/sshd_$i.conf" << CONF
ListenAddress 10.77.0.$i
Port 22
HostKey $work/host_key
PidFile $work/sshd_$i.pid
AuthorizedKeysFile $work/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
CONF
  ip netns exec $ns /usr/sbin/sshd -f "$work/sshd_$i.conf" -E "$work/sshd_$i.log" || {
    cat "$work/sshd_$i.log"
    exit 1
  }
done
# The client side of a user's ~/.ssh/config, for ssh, pdsh and mpirun alike: a wrapper first on PATH.
cat > "$work/ssh_config" << CONF
Host *
  IdentityFile $work/user_key
  IdentitiesOnly yes
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  LogLevel ERROR
CONF
printf '#!/bin/sh\nexec /usr/bin/ssh -F %s "$@"\n' "$work/ssh_config" > "$work/bin/ssh"
chmod +x "$work/bin/ssh"
printf '10.77.0.1 slots=2\n10.77.0.2 slots=2\n' > "$work/hostfile"

# Every node must answer before a case starts (sshd may still be binding).
for i in 1 2; do
  for try in $(seq 50); do
    ip netns exec $ns_a env PATH="$work/bin:$PATH" ssh -o BatchMode=yes 10.77.0.$i true 2> /dev/null && break
    sleep 0.1
  done
done

fail() { echo "FAIL: $*"; echo "--- output ---"; cat "$log"; exit 1; }

small=(--layers 2 --hidden 64 --heads 4 --seq-len 32)
on_host_a() {  # the launcher as a user on host A runs it
  ip netns exec $ns_a env PATH="$work/bin:$PATH" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$@"
}
final_line() { grep -o "final step=.*loss=[^ ]* params_l2=[^ ]*" "$log"; }

# The same training on one host with 4 ranks, as the reference.
reference() {
  "$bin/deepspeed" --num_procs 4 --master_port "$port" "$bin/train_gpt" \
    --deepspeed_config "$configs/ckpt_stage2.json" "${small[@]}" --steps 6 > "$log" 2>&1 ||
    fail "reference run exited with $?"
  final_line
}

# across_hosts <launcher>: ZeRO-2 GPT on 2 hosts x 2 ranks equals the 1-host run. Host A's launcher
# starts 2 ranks of a world of 4, so the run completes only if host B started the other two.
across_hosts() {
  local want got
  want=$(reference)
  on_host_a timeout 120 "$bin/deepspeed" -H "$work/hostfile" --launcher "$1" --master_port "$port" \
    "$bin/train_gpt" --deepspeed_config "$configs/ckpt_stage2.json" "${small[@]}" --steps 6 \
    > "$log" 2>&1 || fail "$1 run exited with $?"
  got=$(final_line)
  echo "reference: $want"
  echo "$1 across 2 hosts: $got"
  grep -q "deepspeed: $1 run on 2 hosts, 4 ranks, master 10.77.0.1:$port" "$log" || fail "no run summary"
  [ -n "$got" ] && [ "$got" = "$want" ] || fail "$1 run differs from the single-host run"
}

ranks_in() {  # ranks_in <ns>: pids of train_gpt processes in that namespace
  for pid in $(ip netns pids "$1"); do
    case "$(tr '\0' '\n' 2> /dev/null < /proc/$pid/cmdline | head -1)" in *train_gpt) echo "$pid" ;; esac
  done
}

case "$case_name" in
  pdsh | ssh | openmpi) across_hosts "$case_name" ;;
  kill_pdsh | kill_ssh | kill_launcher | kill_launcher_ssh)
    # kill_pdsh/kill_ssh: killing host B's ranks stops the job on both hosts; the launcher names
    # host B and exits non-zero. kill_launcher: SIGKILL of the launcher on host A stops every rank
    # on both hosts (each node's launcher sees its ssh session close).
    case "$case_name" in *ssh) launcher=ssh ;; *) launcher=pdsh ;; esac
    on_host_a timeout 120 "$bin/deepspeed" -H "$work/hostfile" --launcher $launcher --master_port "$port" \
      "$bin/train_gpt" --deepspeed_config "$configs/ckpt_stage2.json" "${small[@]}" --steps 100000 \
      > "$log" 2>&1 &
    job=$!
    for try in $(seq 600); do
      grep -q "step 3/" "$log" && break
      sleep 0.1
    done
    grep -q "step 3/" "$log" || fail "training did not start"
    [ "$(ranks_in $ns_b | wc -w)" = 2 ] || fail "expected 2 ranks on host B, found: $(ranks_in $ns_b)"
    if [ "${case_name#kill_launcher}" != "$case_name" ]; then
      head=""
      for pid in $(ip netns pids $ns_a); do  # the head launcher: the one given --launcher
        args=$(tr '\0' ' ' 2> /dev/null < /proc/$pid/cmdline)
        case "$args" in */deepspeed\ *--launcher\ *) head=$pid ;; esac
      done
      [ -n "$head" ] || fail "cannot find the launcher process"
      kill -9 "$head"
    else
      kill -9 $(ranks_in $ns_b)
    fi
    wait $job
    code=$?
    echo "launcher exited with $code"
    [ $code != 0 ] && [ $code != 124 ] || fail "launcher exited with $code (124: it hung)"
    case "$case_name" in
      kill_pdsh) message="deepspeed: host 10.77.0.2 failed (exit code 137); stopping the job" ;;
      kill_ssh) message="deepspeed: host 10.77.0.2 (pid [0-9]*) exited with status 137; stopping 1 other hosts" ;;
      *) message="" ;;
    esac
    [ -z "$message" ] || grep -q "$message" "$log" || fail "the failing host is not named"
    for try in $(seq 200); do
      [ -z "$(ranks_in $ns_a)$(ranks_in $ns_b)" ] && break
      sleep 0.1
    done
    [ -z "$(ranks_in $ns_a)$(ranks_in $ns_b)" ] || fail "ranks left running: $(ranks_in $ns_a) $(ranks_in $ns_b)"
    ;;
  hpz)
    # ZeRO++ hpZ across hosts: with zero_hpz_partition_size 2 on 2 hosts x 2 ranks (ranks numbered host by host, the
    # launcher's LOCAL_WORLD_SIZE 2), backward's all-gathers run within each host. The bytes on the link between the
    # hosts (the veth pair's counters) show it: the hpZ run (units released after forward, so backward gathers them
    # again) moves no more than a run whose backward gathers nothing at all (units kept gathered from forward to
    # backward: stage3_max_reuse_distance 1e9; 1% of the plain run's bytes allowed for the store and the output over
    # ssh), where plain stage 3 (backward gathers across the world) moves more than that run by at least 5% of its
    # bytes. Measured: plain 36.8 MB, kept 31.8 MB, hpZ 30.8 MB. The run ends where the same hpZ run on one host
    # does; a group of 4, which would span both hosts, is refused naming both sizes.
    config() {  # config <name> <hpz size> <reuse distance>
      printf '%s\n' '{"train_micro_batch_size_per_gpu": 4, "steps_per_print": 2,' \
        ' "optimizer": {"type": "AdamW", "params": {"lr": 0.002}},' \
        ' "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,' \
        "   \"stage3_max_reuse_distance\": $3, \"zero_hpz_partition_size\": $2}}" > "$work/$1.json"
    }
    config plain 1 0; config hpz 2 0; config keep 1 1000000000; config span 4 0
    link_bytes() {  # both directions on host A's end of the link
      ip netns exec $ns_a sh -c "cat /sys/class/net/va$tag/statistics/tx_bytes /sys/class/net/va$tag/statistics/rx_bytes" |
        awk '{ s += $1 } END { print s }'
    }
    across() {  # across <config name>: the run on 2 hosts; echoes the bytes it put on the link
      local before after
      before=$(link_bytes)
      on_host_a timeout 120 "$bin/deepspeed" -H "$work/hostfile" --launcher ssh --master_port "$port" \
        "$bin/train_gpt" --deepspeed_config "$work/$1.json" "${small[@]}" --steps 6 > "$log" 2>&1 || return 1
      after=$(link_bytes)
      echo $((after - before))
    }
    "$bin/deepspeed" --num_procs 4 --master_port "$port" "$bin/train_gpt" --deepspeed_config "$work/hpz.json" \
      "${small[@]}" --steps 6 > "$log" 2>&1 || fail "one-host hpZ run exited with $?"
    want=$(final_line)
    plain=$(across plain) || fail "stage 3 across hosts exited with $?"
    keep=$(across keep) || fail "stage 3 keeping units for backward exited with $?"
    hpz=$(across hpz) || fail "hpZ across hosts exited with $?"
    got=$(final_line)
    echo "link bytes: stage 3 $plain, no backward gathers $keep, hpZ 2 $hpz; one host: $want; across hosts: $got"
    [ -n "$got" ] && [ "$got" = "$want" ] || fail "hpZ across hosts differs from the one-host run"
    awk -v p="$plain" -v k="$keep" -v h="$hpz" 'BEGIN { exit !(p - k >= 0.05 * p && h <= k + 0.01 * p) }' ||
      fail "hpZ put $hpz bytes on the link, a run without backward gathers $keep, plain stage 3 $plain"
    across span > /dev/null && fail "a hpZ group spanning both hosts must be refused"
    grep -q "zero_hpz_partition_size 4 must divide the ranks per host (2, LOCAL_WORLD_SIZE)" "$log" ||
      fail "no clear message for a group spanning hosts"
    ;;
  unreachable)
    # A host with no sshd: one line naming it, nothing started.
    printf '10.77.0.1 slots=2\n10.77.0.2 slots=2\n' > "$work/hostfile"
    ip netns exec $ns_b sh -c "kill \$(cat $work/sshd_2.pid)"
    on_host_a "$bin/deepspeed" -H "$work/hostfile" --master_port "$port" "$bin/train_gpt" > "$log" 2>&1
    code=$?
    cat "$log"
    [ $code = 1 ] || fail "exit code $code, want 1"
    [ "$(wc -l < "$log")" = 1 ] || fail "want one line"
    grep -q "^deepspeed: error: host '10.77.0.2' is not reachable over ssh (ssh exited with status 255: .*Connection refused)" "$log" ||
      fail "unexpected message"
    ;;
  *) echo "unknown case $case_name"; exit 2 ;;
esac
echo PASS
