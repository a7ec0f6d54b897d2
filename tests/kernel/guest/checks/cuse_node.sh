# /dev/gpupm0: gpupm-driver --transport cuse on a step clock. The node is a
# character device with a major and minor of its own, root:gpupm-admin
# 0660. Identity, register semantics and refusals (nothing changed);
# EACCES for an unprivileged uid on open and on every request (digest of
# registers and window before and after); 300 context switches
# handshaked through the node, then every block equals the ledger.
# Stopping the driver removes the device.
# Everything here runs on CPU 0: under TCG, waking a thread on the other
# vCPU waits for its next timer tick (4 ms at HZ=250), which would swamp
# every request's cost (see docs/kernel.md).
taskset -p -c 0 $$ > /dev/null
. /checks/lib.sh
[ -c /dev/cuse ] || { echo "/dev/cuse is missing (cuse.ko not loaded?)"; exit 1; }
[ ! -e /dev/gpupm0 ]
gpupm-driver --transport cuse --clock step --debug-ledger --scenario /etc/gpupm/cuse-switching.toml \
    > /tmp/cuse-driver.log 2>&1 &
driver=$!
# A failed step must not leave the device served for the next check.
trap 'kill $driver 2> /dev/null' EXIT
await $driver grep -q "gpupm-driver ready" /tmp/cuse-driver.log || { cat /tmp/cuse-driver.log; exit 1; }
ls -l /dev/gpupm0
echo "@@gpupm metric cuse_sysfs_dev=$(cat /sys/class/cuse/gpupm0/dev)"
gpupm-kpmu cuse-node /dev/gpupm0
gpupm-kpmu cuse-digest /dev/gpupm0 > /tmp/cuse-digest-before
gpupm-kpmu cuse-access /dev/gpupm0 65534 "$GPUPM_ADMIN_GID"
gpupm-kpmu cuse-digest /dev/gpupm0 > /tmp/cuse-digest-after
cmp /tmp/cuse-digest-before /tmp/cuse-digest-after || { echo "unprivileged requests changed the device"; exit 1; }
gpupm-kpmu cuse-handshake /dev/gpupm0 300
stop $driver || { cat /tmp/cuse-driver.log; exit 1; }
trap - EXIT
if [ -e /dev/gpupm0 ] || [ -e /sys/class/cuse/gpupm0 ]; then
    echo "the device outlived the driver"; exit 1
fi
grep -E "character device (created|removed)" /tmp/cuse-driver.log
