# Nothing above left a kernel warning, bug or oops.
dmesg > /tmp/dmesg.txt
grep -i 'gpupm' /tmp/dmesg.txt || true
if grep -E 'BUG|WARNING|Oops' /tmp/dmesg.txt; then
    cat /tmp/dmesg.txt; exit 1
fi
