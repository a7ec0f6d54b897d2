# gpupm_pmu.ko loads and shows the PMU the way perf expects it.
insmod /lib/modules/gpupm_pmu.ko
pmu=/sys/bus/event_source/devices/gpupm
echo "type $(cat $pmu/type) cpumask $(cat $pmu/cpumask)"
[ "$(cat $pmu/cpumask)" -ge 0 ]
for f in event:config:0-15 scope:config:16-19 vm:config1:0-15 ctx:config1:16-31; do
    [ "$(cat $pmu/format/${f%%:*})" = "${f#*:}" ] || { echo "format ${f%%:*}: $(cat $pmu/format/${f%%:*})"; exit 1; }
done
n=$(ls $pmu/events | wc -l)
[ "$n" -eq "$GPUPM_EVENT_COUNT" ] || { echo "$n events, expected $GPUPM_EVENT_COUNT"; exit 1; }
[ "$(cat $pmu/events/sm_inst_executed)" = "event=3" ]
[ "$(cat $pmu/events/nvlink_cycles_active)" = "event=38" ]
ls -l /dev/gpupm_pmu | grep -q '^crw-------'
gpupm-kpmu as-user 65534 -- open-denied /dev/gpupm_pmu
echo "@@gpupm metric pmu_events=$n"
