#!/usr/bin/env bash
# Nsight Compute on the default wgmma prefill (L=8192, D=128, fp16, non-causal): sections, then raw stall and pipe
# metrics (a missing metric name fails only the second call), then the hottest SASS by stall samples.
set -u
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
N="ncu --graph-profiling node -k regex:ks_flash -s 1 -c 1"
$N --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
   --section MemoryWorkloadAnalysis --section Occupancy python3 benchmarks/ncu_attention.py 8192 128 > $OUT/ncu-sections.txt 2>&1
grep -v "^ *$" $OUT/ncu-sections.txt | grep -iE "throughput|busy|stall|pipe|shared|ipc|eligible|issued|active warps|cycles per" | cut -c1-150 | head -40
$N --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__pipe_.*tensor.*cycles_active\.avg\.pct_of_peak_sustained_active,regex:l1tex__data_bank_(reads|writes)\.avg\.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,sm__cycles_elapsed.avg" \
   python3 benchmarks/ncu_attention.py 8192 128 > $OUT/ncu-metrics.txt 2>&1
grep -E "stalled|pipe|bank|inst_executed|cycles_elapsed" $OUT/ncu-metrics.txt | awk '$NF+0 > 0.05 || /pipe|bank|inst|cycles/' | cut -c1-150 | head -40
$N --section SourceCounters python3 benchmarks/ncu_attention.py 8192 128 > $OUT/ncu-source.txt 2>&1
grep -v "^ *$" $OUT/ncu-source.txt | tail -30 | cut -c1-160
