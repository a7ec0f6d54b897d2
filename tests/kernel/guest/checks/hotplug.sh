# CPU hotplug with gpupm events open (docs/kernel.md, "CPU hotplug"): the
# module loaded on CPU 1 counts there; CPU 1 goes offline and its events
# move to CPU 0 and keep counting exactly; it comes back (nothing moves
# back). Then CPU 1 goes offline while the module loads on it, and while
# the module, loaded on CPU 1, unloads: the offline callback must never
# run against a PMU that is not (or no longer) registered.
cpu1=/sys/devices/system/cpu/cpu1/online
pmu=/sys/bus/event_source/devices/gpupm
rmmod gpupm_pmu
taskset -c 1 insmod /lib/modules/gpupm_pmu.ko
gpupm-kpmu hotplug 1 0
rmmod gpupm_pmu
trap 'echo 1 > $cpu1' EXIT
i=0 loads_on_1=0 late=0
while [ $i -lt 6 ]; do
    taskset -c 1 insmod /lib/modules/gpupm_pmu.ko &
    load=$!
    echo 0 > $cpu1
    # taskset fails when CPU 1 went offline before it pinned itself.
    wait $load || late=$((late + 1))
    [ -d $pmu ] || insmod /lib/modules/gpupm_pmu.ko
    [ "$(cat $pmu/cpumask)" = 0 ]
    echo 1 > $cpu1
    rmmod gpupm_pmu
    taskset -c 1 insmod /lib/modules/gpupm_pmu.ko
    [ "$(cat $pmu/cpumask)" = 1 ] && loads_on_1=$((loads_on_1 + 1))
    rmmod gpupm_pmu &
    unload=$!
    echo 0 > $cpu1
    wait $unload
    echo 1 > $cpu1
    i=$((i + 1))
done
trap - EXIT
echo "@@gpupm metric hotplug_race_cycles=$i"
echo "@@gpupm metric hotplug_loads_on_cpu1=$loads_on_1"
echo "@@gpupm metric hotplug_offline_before_pinning=$late"
insmod /lib/modules/gpupm_pmu.ko
