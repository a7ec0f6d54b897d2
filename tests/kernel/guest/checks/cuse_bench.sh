# A register read through /dev/gpupm0 (ioctl) against one through the
# FUSE card0 (pread, and the same ioctl) and against a perf software
# counter's read(); a block-slot window read on both nodes. Both drivers
# on step clocks, so only the requests run in them.
# Everything here runs on CPU 0: under TCG, waking a thread on the other
# vCPU waits for its next timer tick (4 ms at HZ=250), which would swamp
# every request's cost (see docs/kernel.md).
taskset -p -c 0 $$ > /dev/null
. /checks/lib.sh
mkdir -p /tmp/bench-fuse
gpupm-driver --clock step --node-dir /tmp/bench-fuse > /tmp/bench-fuse.log 2>&1 &
fuse=$!
gpupm-driver --transport cuse --clock step > /tmp/bench-cuse.log 2>&1 &
cuse=$!
trap 'kill $fuse $cuse 2> /dev/null' EXIT
await $fuse grep -q "gpupm-driver ready" /tmp/bench-fuse.log &&
    await $cuse grep -q "gpupm-driver ready" /tmp/bench-cuse.log || { cat /tmp/bench-fuse.log /tmp/bench-cuse.log; exit 1; }
gpupm-kpmu cuse-bench /dev/gpupm0 /tmp/bench-fuse 9
stop $cuse $fuse
trap - EXIT
