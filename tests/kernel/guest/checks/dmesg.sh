# Nothing above left a kernel warning, bug, oops, lockup or RCU stall, or a
# sleeping call in atomic context.
dmesg > /tmp/dmesg.txt
grep -i 'gpupm' /tmp/dmesg.txt || true
if grep -E 'BUG|WARNING|Oops|Call Trace|general protection|sleeping function|lockup|rcu.*stall' /tmp/dmesg.txt; then
    cat /tmp/dmesg.txt; exit 1
fi
