# 10,000 random perf_event_open configs as an unprivileged user (perf
# lets it through to the PMU with perf_event_paranoid=-1; the PMU refuses)
# and 10,000 as root, each checked against the model of the PMU's rules.
old=$(cat /proc/sys/kernel/perf_event_paranoid)
echo -1 > /proc/sys/kernel/perf_event_paranoid
gpupm-kpmu as-user 65534 -- fuzz 10000 1 unprivileged
echo "$old" > /proc/sys/kernel/perf_event_paranoid
gpupm-kpmu fuzz 10000 2
