#!/bin/sh
# Two "hosts" on one machine: a trainer across 2 processes (mpcc -cpus 1
# --nodes=2), each in a network namespace of its own with a hostname of its
# own, joined by a veth pair, so that the processes meet over TCP as on two
# machines:
#   - mpirun runs in host A's namespace and starts host B's process through
#     a launcher that enters host B's namespace (Open MPI's rsh launcher,
#     plm_rsh_agent), as ssh would on a cluster;
#   - MPI may use TCP only, over the veth subnet (btl tcp,self: no shared
#     memory between the processes);
#   - the veth's byte counters must have carried at least every step's
#     gradient sum (the stage's gradients, out and back);
#   - the losses and checkpoint are one process's, byte for byte.
# Needs root's CAP_NET_ADMIN and CAP_SYS_ADMIN (ip netns, unshare --uts);
# without them it says why and exits 77 (skipped).
# Usage: two_hosts.sh MPCC SAMPLES WORKDIR
set -eu
mpcc=$1 samples=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work" && cd "$work"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
a=mpcc_a$$ b=mpcc_b$$ net=10.231.$(($$ % 200 + 20))
cleanup() {
    ip netns del "$a" 2>/dev/null || true
    ip netns del "$b" 2>/dev/null || true
}
trap cleanup EXIT INT TERM
if ! ip netns add "$a" 2>netns.err || ! ip netns add "$b" 2>>netns.err ||
   ! ip netns exec "$a" unshare --uts true 2>>netns.err; then
    echo "two_hosts: skipped: network namespaces are not allowed here: $(head -1 netns.err)"
    exit 77
fi
ip link add veth_a netns "$a" type veth peer name veth_b netns "$b"
ip -n "$a" addr add "$net.1/24" dev veth_a
ip -n "$b" addr add "$net.2/24" dev veth_b
for ns in "$a" "$b"; do
    ip -n "$ns" link set lo up
done
ip -n "$a" link set veth_a up
ip -n "$b" link set veth_b up

# the launcher: "agent HOST COMMAND..." runs COMMAND in HOST's namespace,
# under a hostname of its own (as ssh HOST COMMAND would)
cat >enter_host.sh <<EOF
#!/bin/sh
host=\$1
shift
[ "\$host" = "$net.2" ] || { echo "enter_host: unknown host \$host" >&2; exit 1; }
exec ip netns exec "$b" unshare --uts sh -c "hostname host-b; \$*"
EOF
chmod +x enter_host.sh
printf '%s slots=1\n%s slots=1\n' "$net.1" "$net.2" >hosts

. "$here/build_trainer.sh"   # build NAME
flags="-batch 16 --microbatches=8 --optimizer=adamw --schedule=gpipe"
"$mpcc" "$samples/gpt.mp" -cpus 1 --data-parallel=1 $flags -o one.c 2>one.mpcc ||
    { cat one.mpcc; exit 1; }
"$mpcc" "$samples/gpt.mp" -cpus 1 --data-parallel=2 --nodes=2 $flags -o two.c 2>two.mpcc ||
    { cat two.mpcc; exit 1; }
build one
build two
steps=6
./one --synthetic --seed 5 --steps $steps --loss-log one.txt --save one.safetensors 2>one.log ||
    { cat one.log; exit 1; }

counter() {   # the bytes veth_b has received and sent
    echo $(( $(ip netns exec "$b" cat /sys/class/net/veth_b/statistics/rx_bytes) +
             $(ip netns exec "$b" cat /sys/class/net/veth_b/statistics/tx_bytes) ))
}
before=$(counter)
ip netns exec "$a" unshare --uts sh -c "hostname host-a; exec mpirun -np 2 \
    --hostfile hosts --mca plm_rsh_agent $work/enter_host.sh --mca plm_rsh_no_tree_spawn 1 \
    --mca btl tcp,self --mca btl_tcp_if_include $net.0/24 --mca oob_tcp_if_include $net.0/24 \
    --wdir $work ./two --synthetic --seed 5 --steps $steps --loss-log two.txt \
    --save two.safetensors" 2>two.log || { cat two.log; exit 1; }
moved=$(( $(counter) - before ))

# every step sums the gradients of the stage: each process sends its half
# and receives the other's (reduce-scatter, all-gather), at least
# 2 x 4 bytes x parameters over the link
params=$(/usr/bin/python3 - <<'EOF'
from safetensors.numpy import load_file
w = load_file("one.safetensors")
print(sum(v.size for k, v in w.items() if not k.endswith((".exp_avg", ".exp_avg_sq"))))
EOF
)
least=$(( steps * 2 * 4 * params ))
[ "$moved" -ge "$least" ] || {
    echo "FAIL: veth_b carried $moved bytes, less than the $least of $steps gradient sums"
    exit 1
}
cmp one.txt two.txt || { echo "FAIL: the losses over two hosts differ from one process's"; exit 1; }
cmp one.safetensors two.safetensors ||
    { echo "FAIL: the checkpoint over two hosts differs from one process's"; exit 1; }
echo "two_hosts: 2 processes in 2 network namespaces (host-a, host-b) over veth and TCP:" \
    "$moved bytes crossed the link (at least $least for $steps sums of $params floats);" \
    "the losses ($(tr '\n' ' ' <one.txt)) and checkpoint of one process, byte for byte"
