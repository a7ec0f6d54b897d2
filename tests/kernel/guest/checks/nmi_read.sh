# A reader inside the module's write section, as an NMI would be: a BPF
# program on a kprobe at gpupm_apply_copy reads a gpupm event there with
# interrupts off, on the publishing CPU, 40 times (docs/kernel.md, "Reads
# never wait"). Each publication must return, the reads see the old value
# then the new one, and none fails or is stale.
gpupm-kpmu nmi-read 40
[ "$(cat /sys/bus/event_source/devices/gpupm/stale_reads)" = 0 ]
