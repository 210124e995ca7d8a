#!/usr/bin/env python3
"""ncu-step-table.py — one decode step of an Nsight Compute CSV, kernel by kernel.

Reads the `--csv --page raw` output that scripts/cuda-device-run.sh writes
for NCU=name (metrics gpu__time_duration.sum, dram__bytes_read.sum,
launch__grid_size), takes the launches from one embedding lookup (the
first kernel of a step) to the next, and prints a markdown table: launches,
us per step, share, us each, DRAM bytes read and their rate, one row per
kernel name and grid size (the same kernel on another shape is another
row). The profiler serializes launches, so the sum is more than a step
takes in a graph replay with dependent launches.

usage: ncu-step-table.py ncu-NAME.csv [first-kernel-substring]
"""
import csv
import re
import sys


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    start = sys.argv[2] if len(sys.argv) > 2 else "get_rows"
    with open(sys.argv[1], newline="") as f:
        rows = list(csv.reader(line for line in f if line.startswith('"')))
    if len(rows) < 3:
        sys.exit(f"{sys.argv[1]}: no profiled launches")
    head, data = rows[0], rows[2:]  # rows[1] holds the units
    try:
        kn, tm, dr, gr = (head.index(c) for c in ("Kernel Name", "gpu__time_duration.sum",
                                                  "dram__bytes_read.sum", "launch__grid_size"))
    except ValueError as e:
        sys.exit(f"{sys.argv[1]}: a metric is missing ({e})")
    marks = [i for i, r in enumerate(data) if start in r[kn]]
    if len(marks) < 2:
        sys.exit(f"{sys.argv[1]}: fewer than two '{start}' launches; profile more launches")
    step = data[marks[0]:marks[1]]

    def num(s):
        return float(s.replace(",", ""))

    agg = {}
    for r in step:
        name = re.sub(r"\(.*", "", r[kn]).replace("void ", "").strip()
        key = (name, r[gr])
        a = agg.setdefault(key, [0, 0.0, 0.0])
        a[0] += 1
        a[1] += num(r[tm]) / 1000.0  # ns -> us
        a[2] += num(r[dr]) / 1e6     # bytes -> MB
    total = sum(a[1] for a in agg.values())
    mb = sum(a[2] for a in agg.values())
    print(f"{len(step)} launches, {total:,.1f} us serialized, {mb:,.1f} MB read "
          f"({mb / 4.23:,.1f} us at 4.23 TB/s)\n")
    print("| kernel | grid | launches | us per step | share | us each | DRAM MB | GB/s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for (name, grid), (n, us, m) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        rate = f"{m / us * 1000:,.0f}" if m >= 1 else "-"
        print(f"| {name} | {grid} | {n} | {us:,.1f} | {100 * us / total:.1f}% | {us / n:.2f} | "
              f"{m:,.1f} | {rate} |")


if __name__ == "__main__":
    main()
