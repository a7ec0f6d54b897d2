#!/bin/busybox sh
# The guest's init: mounts the pseudo file systems, loads the modules the
# image lists, runs every check in /checks/list with `sh -e` and reports
# one line per check (tests/kernel/src/lib.rs parses them), then powers off.
/bin/busybox --install -s /bin
export PATH=/usr/bin:/bin:/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
uptime_s() { cut -d' ' -f1 /proc/uptime; }
echo "@@gpupm boot uptime=$(uptime_s)"
set -a
. /etc/gpupm-lane.env
set +a
for m in $GPUPM_MODULES; do insmod "$m" || echo "@@gpupm metric insmod_failed=$m"; done
ip link set lo up
for check in $(cat /checks/list); do
    start=$(uptime_s)
    if sh -e "/checks/$check.sh"; then status=pass; else status=fail; fi
    echo "@@gpupm check $check $status start=$start end=$(uptime_s)"
done
echo "@@gpupm done uptime=$(uptime_s)"
poweroff -f
