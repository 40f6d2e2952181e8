#!/usr/bin/env bash
# The GPU suite: the GPU tests and every benchmark behind the GPU figures of README.md and docs/, one part a call.
# Every part ends inside 10 minutes; results (JSON, logs) go to $OUT (default ./gpu-suite-out).
#
# On a machine with network access, in the checkout (the GPU machine may have none):
#   bash benchmarks/gpu_suite.sh stage     # .device/a/, .device/d/ and .device/b/ (git-ignored): MLX's CUDA wheel
#                                          # split in three parts, MLX's other wheels and .device/b/install.sh;
#                                          # .device/c/: the LLM path's wheels (openai, jsonschema), which no part
#                                          # below needs
# On the GPU machine (x86-64, NVIDIA, Python 3.12), from the repository root, with .device/ copied over (.device/a
# and .device/d first: they may travel in earlier copies than .device/b; each copy, a folder with the working tree,
# under 64 MiB):
#   bash .device/b/install.sh              # joins the parts, installs MLX (CUDA); a part runs it itself if needed
#   bash benchmarks/gpu_suite.sh PART [ARGS]
#
# Parts (what each reproduces: benchmarks/README.md):
#   tests [all|core|attention|families|options|FILE...]  pytest -m gpu: core = foundation, kernel names, knowledge
#                                   exemplars, Mamba; attention = every library attention / decode configuration
#                                   against fp32; families = every CUDA template family's renderings through the
#                                   harness; options = the families' options (tensor cores, block floor, constants,
#                                   holdout workloads), prefill options named outright (_wt, _uw, _m1; _hs and
#                                   _kt, the dispatch's by shape; _qt, opt-in) against fp32, tile images,
#                                   the cluster decode, the float32 prefill and its dispatch; all (the
#                                   default) = the four
#                                   side by side, a log each ($OUT/gpu-tests-GROUP.log)
#   prefill                         check-prefill against fp32, then `ksearch bench attention --full`
#   prefill-calls                   `bench attention --full` with the calls chained and independent, two processes
#                                   each (the dispatch's own column both ways)
#   prefill-configs [CONFIG...]     wgmma configurations side by side (attention_wgmma_check.py) and their ratios
#   prefill-candidates CONFIG...    configurations beside the dispatch: check-prefill (KS_CHECK_CONFIGS), `bench
#                                   attention --full --configs` in two processes (CALLS=chained: the calls chained;
#                                   CALLS="independent chained": both; LENGTHS=2048: the shapes at those lengths
#                                   only), their items traced at L=2048 (NO_TRACE=1: not; CHECK_S: the check's
#                                   limit, 200 s)
#   prefill-variant VARIANT...      the dispatch beside its own kernel with flags off or on at every shape
#                                   (dispatch-r1, dispatch+hs, dispatch-sn-r1: `bench attention --full --configs`),
#                                   in the same rounds, the calls chained and independent, two processes each (three or
#                                   more variants: KSEARCH_VARIANT_CALLS=chained, then =independent, a call each)
#   prefill-fp32                    the float32 3xTF32 prefill, its forms, against true fp32, then beside MLX's
#                                   float32 attention with TF32 on (MLX's default) and off (prefill_fp32.py); the
#                                   attention family's float32 path through the harness at the fp32 holdout workload
#   prefill-small                   tile images checked and timed; a small prefill call taken apart
#   tile-ceiling [ARGS]             the tensor cores' ceiling for a prefill tile, per layout (wgmma_tile_ceiling.py;
#                                   ARGS are its options; 20,000 tiles a block)
#   item-trace [ARGS]               where a prefill work item's time goes (prefill_item_trace.py; ARGS are its options;
#                                   by default the library's three kernels at D=128, L=2048 and 8192)
#   prefill-power [ARGS]            prefill calls back to back, the library's beside cuDNN's, with the board's power,
#                                   clock and power-cap share sampled (prefill_power.py; ARGS are its options)
#   decode                          `ksearch bench decode`, check-decode, the configuration sweep, MLX-CUDA overheads,
#                                   a decode call's host time by how its kernels are called (decode_host_time.py)
#   bench-decode [FLAG...]          `ksearch bench decode` alone (FLAGs as the command's, e.g. --calls independent)
#   decode-versus-native [CONFIG...]  split-K configurations (e.g. warps=8,unroll=4) beside native on `bench decode`'s
#                                   shapes, each call synchronised, or `--queued` (with `--chained`: each call's
#                                   query the previous call's output, as `bench decode`; attention_gpu.py)
#   decode-power [CONFIG...]        decode calls back to back with the board's power, clock and power-cap share
#                                   sampled (decode_power.py; default contenders: ring=0 mma beside the library)
#   decode-cluster                  the opt-in cluster decode with CUDA graphs off: check, sweep, bench; the hazard
#   mamba                           `ksearch bench mamba` on the default and on the fused layout
#   scan                            scan / decode-step micro benchmark; the best scan kernel through the harness
#   naive                           `ksearch bench naive`: every task's naive starter through the harness
#   eval-phases                     where an evaluation's time goes (softmax, attention, gqa_decode; JSON per task)
#   fidelity [TASK...]              harness timings against a plain loop, asserted within 10% (JSON per task;
#                                   KSEARCH_FIDELITY_PROCESSES=N: the plain loop in N + 1 fresh processes)
#   null-containment [TASK]         the null test (the library kernel as its own baseline, 3 fresh processes a side)
#                                   with the candidate's containment as is, off, without Landlock, without namespaces
#                                   (KSEARCH_SANDBOX; default gqa_decode): what each mechanism costs a timed call
#   baseline-spread [TASKS] [N]     fresh evaluators' baseline timings, one process against the median of three
#                                   (baseline_spread.py; default gqa_decode, 6 evaluators a setting)
#   harness-loop [TASKS]            the worker's timed loop in one process beside the plain loop: in runs, one call a
#                                   run, parts taken out (harness_conditions.py --worker-loop; default
#                                   selective_state_update,gqa_decode: the short calls)
#   between-runs [TASKS]            what each part of the harness's work between runs does to the next run of a short
#                                   kernel (between_runs.py; default softmax,gqa_decode,selective_state_update)
#   process-spread [TASKS]          the plain loop in fresh processes, free and held to one CPU (process_spread.py;
#                                   default gqa_decode,selective_state_update,softmax): the floor under fidelity
#   gaps TASK...                    one evaluation's timed batches taken apart per task (harness_gaps.py): run
#                                   lengths, calls and the harness's work between calls, candidate and baseline
#   ncu [ARGS]                      Nsight Compute on prefill configurations side by side, one shape: cycles a tile,
#                                   instructions, stall reasons (ncu_prefill.py; ARGS are its options; by default
#                                   `WIDE` beside its persistent form at B 1, L=4096, D=128; --source keeps reports)
#   profile-capture                 `ksearch eval --profile` on the gqa_decode and attention starters; ncu's raw CSV
#                                   kept under $OUT/ncu/ (copy one to tests/data/ncu/ as the parser's real fixture)
#   profile-feedback TASK [BUDGET] [best|off]   offline search with profile best vs off, same budget (default
#                                   16) and seed, one arm a call if given; `profile-feedback merge` joins the parts
#   selection-rules TASK [BUDGET] [SEED...]   the selection rules (selection_rules.py) with shared verdicts, budget
#                                   60, seed 1: each distinct candidate judged once; call again to go on (the verdicts and the
#                                   result so far stay under $KSEARCH_SUITE_RUNS while the machine does, and are
#                                   copied to $OUT: bring them back as VERDICTS=FILE RESULT=FILE on a fresh machine)
#   search TASK WALL_S [CALL_S]     an offline search (budget $BUDGET, default 120) with --wall-time WALL_S, stopped
#                                   after CALL_S (default min(WALL_S + 60, 540)) and resumable; then its record
#   resume RUN [CALL_S] [WALL_S]    continue a search started by `search` on this machine, or on another: RUN may be
#                                   the run-NAME.tar.gz that `record` leaves in $OUT (WALL_S: the run's wall time
#                                   raised, for a run that ended on it); then its record
#   record RUN                      a run's summary JSON and its per-evaluation table
#   holdout RUN                     the run's best judged on the task's holdout workloads (ksearch eval --holdout)
#   confirm RUN [TOP] [TIMES]       the run's TOP best (3) timed again TIMES times each (3), in turns; the pick by
#                                   median (ksearch confirm; RUN as for resume, e.g. a run-NAME.tar.gz of
#                                   benchmarks/results/search-runs/; ADOPT=1: the pick as the run's result, its
#                                   holdout judged again, --adopt); keeps the JSON it wrote
set -uo pipefail
cd "$(git rev-parse --show-toplevel 2>/dev/null || pwd)"
OUT=${OUT:-$PWD/gpu-suite-out}
RUNS=${KSEARCH_SUITE_RUNS:-/tmp/ksearch-suite-runs}  # stays while the machine does, so a search resumes there
MLX_VERSION=${MLX_VERSION:-0.32.4}
PY=${PY:-python3}

die() { echo "gpu_suite: $*" >&2; exit 2; }
KS=("$PY" -m ksearch.cli)  # the `ksearch` command, without relying on its entry point being on PATH

refuse_bad_names() {
  # PART MODULE PARSER NAME...: each name through ksearch's parser before any set-up; the first refusal in one line.
  local part=$1 module=$2 parser=$3 bad
  shift 3
  bad=$(PYTHONPATH=$PWD/src "$PY" - "$module" "$parser" "$@" 2>/dev/null <<'CHECK'
import importlib
import sys
parse = getattr(importlib.import_module(sys.argv[1]), sys.argv[2])
try:
    [parse(n) for n in sys.argv[3:]]
except ValueError as exc:
    print(exc)
CHECK
)
  [ -z "$bad" ] || die "$part: $bad"
}

stage() {
  # Wheels for an offline x86-64 machine with Python 3.12; the CUDA wheel (~90 MB) is split in three so that each
  # folder with the working tree beside it stays under 64 MiB (the limit of what one copy to the GPU machine may
  # carry; two parts of 45 MB stopped fitting once the tree passed 20 MB).
  local plat=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_35_x86_64
              --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
  rm -rf .device && mkdir -p .device/a .device/b/wheels .device/d .device/dl .device/deps
  "$PY" -m pip download -q --no-deps "${plat[@]}" -d .device/dl "mlx==$MLX_VERSION" "mlx-cuda-13==$MLX_VERSION" mlx-lm \
    || die "pip download failed (this step needs network access)"
  # What a GPU image with numpy, torch, rich, typer, jinja2, pyyaml, psutil, matplotlib, pytest and transformers
  # lacks of the project's dependencies: openai and jsonschema, with their own.
  "$PY" -m pip download -q "${plat[@]}" -d .device/deps openai jsonschema || die "pip download failed"
  for w in .device/deps/*.whl; do
    case "$(basename "$w")" in
      openai-*|pydantic*|jiter-*|distro-*|sniffio-*|jsonschema*|referencing-*|rpds_py-*|annotated_types-*|typing_inspection-*)
        mv "$w" .device/dl/ ;;
    esac
  done
  rm -rf .device/deps
  local big name
  big=$(ls .device/dl/mlx_cuda_13-*.whl) && name=$(basename "$big")
  split -b 30000000 "$big" .device/part_ && rm "$big"
  mv .device/part_aa .device/a/part_aa && mv .device/part_ab .device/b/part_ab && mv .device/part_ac .device/d/part_ac
  # One copy to the GPU machine carries a folder with the working tree beside it (~15 MB) and may not pass 64 MiB,
  # so MLX's wheels go with part 2 and the LLM path's (openai, jsonschema and theirs) in a third folder, copied only
  # where that path runs there: every GPU part of this script works without it.
  mkdir -p .device/c/wheels && mv .device/dl/mlx*.whl .device/b/wheels/ && mv .device/dl/*.whl .device/c/wheels/
  rmdir .device/dl
  cat > .device/b/install.sh <<INSTALL
#!/usr/bin/env bash
# Written by benchmarks/gpu_suite.sh stage: joins the three parts and installs MLX (CUDA) and the staged wheels.
set -e
here=\$(cd "\$(dirname "\$0")" && pwd)
for part in a/part_aa d/part_ac; do
  [ -f "\$here/../\$part" ] || { echo "\$part is not here: bring .device/a and .device/d first" >&2; exit 3; }
done
cat "\$here/../a/part_aa" "\$here/part_ab" "\$here/../d/part_ac" > "\$here/$name"
\${PY:-python3} -m pip install -q --no-index --no-deps "\$here/$name" "\$here"/wheels/*.whl
if ls "\$here"/../c/wheels/*.whl >/dev/null 2>&1; then
  \${PY:-python3} -m pip install -q --no-index --no-deps "\$here"/../c/wheels/*.whl
else
  echo "note: .device/c (openai, jsonschema) is not here; the GPU benchmarks and tests run without it" >&2
fi
rm -f "\$here/$name"
\${PY:-python3} -c "import mlx.core as mx; assert mx.cuda.is_available(); print('mlx', mx.__version__, mx.default_device())"
INSTALL
  chmod +x .device/b/install.sh
  local tree part
  tree=$(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1)
  for part in a b c d; do
    (( $(du -sb ".device/$part" | cut -f1) + tree < 64 * 1024 * 1024 )) \
      || echo "gpu_suite: .device/$part with the working tree passes 64 MiB: one copy cannot carry it" >&2
  done
  du -sh .device/a .device/b .device/c .device/d
  echo "staged: copy .device/a, .device/d, then .device/b (and .device/c for the LLM path), to the GPU machine; there run: bash benchmarks/gpu_suite.sh PART"
}

# The float32 3xTF32 prefill: checked, timed with TF32 on and off, and the attention family's float32 path through the
# harness at the task's fp32 holdout workload (its verdict as JSON).
prefill_fp32() {
  timeout -k 10 200 "$PY" benchmarks/prefill_fp32.py check 2>&1 | tee "$OUT/prefill-fp32-check.log" | tail -3
  timeout -k 10 150 "$PY" benchmarks/prefill_fp32.py bench "$OUT" 2>&1 | tail -13
  timeout -k 10 150 "$PY" benchmarks/prefill_fp32.py bench "$OUT" --tf32-off 2>&1 | tail -13
  "$PY" benchmarks/render_template.py attention.cuda.flash_wgmma > "$OUT/flash-wgmma.py"
  timeout -k 10 120 "${KS[@]}" eval attention "$OUT/flash-wgmma.py" --backend mlx-cuda \
    --workloads gpu_b1_h32_kv8_l2048_d128_f32 --json > "$OUT/eval-flash-wgmma-f32.json"
  "$PY" -c 'import json, sys; w = json.load(open(sys.argv[1]))["workloads"][0]
print(w["name"], w["status"], w["speedup"], w["message"][:300])' "$OUT/eval-flash-wgmma-f32.json"
}

setup() {
  mkdir -p "$OUT" || die "cannot write $OUT"
  export PYTHONUNBUFFERED=1
  if ! "$PY" -c 'import mlx.core as mx; assert mx.cuda.is_available()' 2>/dev/null; then
    [ -f .device/b/install.sh ] || die "MLX with CUDA is missing: run 'bash benchmarks/gpu_suite.sh stage' where there \
is network, copy .device/ here, then run this again"
    bash .device/b/install.sh || exit 3
  fi
  # The checkout itself, without dependencies (the machine may be offline); PYTHONPATH in case the build fails.
  "$PY" -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || echo "(pip install -e . failed: using PYTHONPATH)"
  export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || true  # its status is not setup's
}

TEST_GROUPS=(core attention families options)
group_args() {  # a group's pytest arguments, in the array ARGS
  case "$1" in
    core) ARGS=(tests/test_gpu_foundation.py tests/test_gpu_kernel_names.py tests/test_knowledge_exemplars.py
                tests/test_gpu_mamba.py) ;;
    # together the two took 568 s of a 570 s limit (logs/gpu-tests-attention-content-names-h200.log): split
    attention) ARGS=(tests/test_gpu_attention.py -k every_library_configuration) ;;
    # with the families' constants the two took longer than 420 s (logs/gpu-tests-families-constants-h200.log): split
    families) ARGS=(tests/test_gpu_attention.py -k renderings_pass_the_harness) ;;
    options) ARGS=(tests/test_gpu_attention.py tests/test_gpu_decode_cluster.py
                   -k "not every_library_configuration and not renderings_pass_the_harness") ;;
    *) return 1 ;;
  esac
}

run_tests() {
  local g
  if [ "${1:-all}" = all ]; then
    # Every group at once, a process each: most of their time is NVRTC compiling on a core of its own, so three groups
    # side by side took 432 s (logs/gpu-tests-*-constants-h200.log) where alone they had taken 230-320 s each.
    for g in "${TEST_GROUPS[@]}"; do
      group_args "$g"
      timeout -k 10 560 "$PY" -m pytest -q -m gpu -p no:cacheprovider "${ARGS[@]}" > "$OUT/gpu-tests-$g.log" 2>&1 &
    done
    wait
    for g in "${TEST_GROUPS[@]}"; do
      echo "$g: $(tail -n 1 "$OUT/gpu-tests-$g.log")"
      grep -E "^(FAILED|ERROR)" "$OUT/gpu-tests-$g.log" | cut -c1-200
    done
    return
  fi
  if group_args "$1"; then :; else ARGS=("$@"); fi
  timeout -k 10 570 "$PY" -m pytest -q -m gpu -p no:cacheprovider "${ARGS[@]}" 2>&1 | tee "$OUT/gpu-tests.log" | tail -30
}

prefill() {
  timeout -k 10 360 "$PY" benchmarks/attention_gpu.py check-prefill > "$OUT/attention-check-prefill.log" 2>&1
  grep -v " ok$" "$OUT/attention-check-prefill.log" | tail -5
  timeout -k 10 300 "${KS[@]}" bench attention --full --out "$OUT" 2>&1 | tail -3
}

prefill_calls() {
  # The dispatch's own column over the 96 shapes with the calls chained (each call's query the previous call's
  # output, as a model's layers) and independent (free to overlap), each in two processes.
  local mode run
  for run in 1 2; do
    for mode in chained independent; do
      timeout -k 10 140 "${KS[@]}" bench attention --full --calls "$mode" --out "$OUT/$mode-$run" 2>&1 | tail -1 \
        | cut -c1-400
    done
  done
}

prefill_candidates() {
  # Configurations not yet in the dispatch, in one call: checked against fp32, timed beside the dispatch over the 96
  # shapes in two processes, and their work items traced at L=2048 (D=128; their own phases and cycles a tile).
  local list
  list=$(IFS=,; echo "$*")
  KS_CHECK_CONFIGS=$list timeout -k 10 "${CHECK_S:-200}" "$PY" benchmarks/attention_gpu.py check-prefill \
    > "$OUT/attention-check-prefill-candidates.log" 2>&1
  echo "check-prefill: $(grep -c ' ok$' "$OUT/attention-check-prefill-candidates.log") ok"
  grep -v " ok$" "$OUT/attention-check-prefill-candidates.log" | tail -4
  grep -q "prefill: 0 failures" "$OUT/attention-check-prefill-candidates.log" || die "a candidate failed its check"
  local run calls
  for calls in ${CALLS:-independent}; do  # CALLS="independent chained": both, after one check
    for run in candidates candidates-rerun; do
      timeout -k 10 150 "${KS[@]}" bench attention --full --calls "$calls" --lengths "${LENGTHS:-}" \
        --configs "$list" --out "$OUT/$run" 2>&1 | tail -1 | cut -c1-600
    done
  done
  [ -n "${NO_TRACE:-}" ] && return 0
  timeout -k 10 100 "$PY" benchmarks/prefill_item_trace.py "$OUT/item-trace" --lengths 2048 \
    --configs "ws3_n64_s4_p4_tmas_cr,$list" 2>&1 | grep -v "^wrote" | cut -c1-400
}

prefill_variant() {
  # A flag's effect on the dispatch, every shape against the dispatch's own kernel in the same rounds (between two
  # processes the dispatch's column moves by as much as a flag's effect). On an H100 a run took about 110 s with two
  # variants and 150-170 s with four: each run is cut at 90 s + 30 s a variant, and KSEARCH_VARIANT_CALLS (default
  # "chained independent") runs one protocol a call where the four runs would not fit one 600 s call.
  local list run calls cut=$((90 + 30 * $#))
  list=$(IFS=,; echo "$*")
  for calls in ${KSEARCH_VARIANT_CALLS:-chained independent}; do
    for run in variant variant-rerun; do
      timeout -k 10 "$cut" "${KS[@]}" bench attention --full --calls "$calls" --configs "$list" --out "$OUT/$run" \
        2>&1 | tail -1 | cut -c1-600
    done
  done
}

prefill_configs() {
  local configs=("$@")
  [ ${#configs[@]} -gt 0 ] || configs=(ws3_n64_s4_p4_bulk ws3_n64_s3_p4_bulk ws3_n64_s3_p4 wg3_n64_ca)
  timeout -k 10 560 "$PY" benchmarks/attention_wgmma_check.py "$OUT" "${configs[@]}" 2>&1 | grep "^{'D'\|error\|timed out" \
    | cut -c1-400
  # Each configuration's geometric-mean TFLOP/s against the first, over the shapes both ran (printed on stderr).
  "$PY" benchmarks/wgmma_compare.py "$OUT/wgmma-check.json" "${configs[0]}" 0 "${configs[@]:1}" >/dev/null
}

prefill_small() {
  timeout -k 10 200 "$PY" benchmarks/tile_image_check.py "$OUT/tile-image.json" 2>&1 | tail -8
  timeout -k 10 300 "$PY" benchmarks/prefill_overhead.py "$OUT/prefill-overhead.json" 2>&1 | tail -8
  timeout -k 10 150 "$PY" benchmarks/prefill_scaling.py "$OUT" --lengths 2048 --heads 8,16,32,64,128 2>&1 | tail -3
  timeout -k 10 60 "$PY" benchmarks/prefill_host_time.py "$OUT" 2>&1 | tail -6
}

decode() {
  timeout -k 10 240 "${KS[@]}" bench decode --out "$OUT" 2>&1 | tail -14
  timeout -k 10 120 "$PY" benchmarks/attention_gpu.py check-decode > "$OUT/attention-check-decode.log" 2>&1
  tail -1 "$OUT/attention-check-decode.log"
  timeout -k 10 180 "$PY" benchmarks/attention_gpu.py sweep-decode "$OUT/decode-config-sweep.json" 2>&1 | tail -3
  timeout -k 10 90 "$PY" benchmarks/mlx_cuda_overhead.py "$OUT/mlx-cuda-overhead.json" 2>&1 | tail -12
  timeout -k 10 90 "$PY" benchmarks/decode_host_time.py "$OUT" 2>&1 | tail -8
}

decode_cluster() {
  # MLX reads MLX_USE_CUDA_GRAPHS when it starts: every process here starts with graphs off, except the hazard's
  # second run, which shows what graphs do after a cluster kernel.
  MLX_USE_CUDA_GRAPHS=0 timeout -k 10 150 "$PY" benchmarks/decode_cluster_check.py check \
    > "$OUT/decode-cluster-check-nographs.log" 2>&1
  tail -2 "$OUT/decode-cluster-check-nographs.log"
  MLX_USE_CUDA_GRAPHS=0 KSEARCH_CLUSTER_CONFIGS=5,3,6 timeout -k 10 200 "$PY" benchmarks/decode_cluster_check.py sweep \
    "$OUT/decode-cluster-sweep-nographs.json" > "$OUT/decode-cluster-sweep-nographs.log" 2>&1
  tail -2 "$OUT/decode-cluster-sweep-nographs.log"
  MLX_USE_CUDA_GRAPHS=0 timeout -k 10 120 "${KS[@]}" bench decode --kernel cluster --out "$OUT" 2>&1 | tail -3
  {  # graphs on (MLX's default), then off
    env -u MLX_USE_CUDA_GRAPHS timeout -k 10 60 "$PY" benchmarks/experiments/cluster_graph_hazard.py 2>&1
    MLX_USE_CUDA_GRAPHS=0 timeout -k 10 60 "$PY" benchmarks/experiments/cluster_graph_hazard.py 2>&1
  } | tee "$OUT/cluster-graph-hazard.log"
}

mamba() {
  timeout -k 10 280 "${KS[@]}" bench mamba --reps 3 --out "$OUT" 2>&1 | tail -12
  mkdir -p "$OUT/fused"  # the same file name: kept apart, committed as mamba-370m-fused-layout-*.json
  KSEARCH_MAMBA_FUSED=1 timeout -k 10 240 "${KS[@]}" bench mamba --reps 3 --no-compare --out "$OUT/fused" 2>&1 | tail -8
}

scan() {
  timeout -k 10 300 "$PY" benchmarks/mamba_scan_micro.py --out "$OUT" 2>&1 | tail -12
  # The measured scan kernel is the selective_scan.cuda.chunked template family's default render.
  "$PY" benchmarks/render_template.py selective_scan.cuda.chunked > "$OUT/selective_scan-best.py" \
    || die "rendering selective_scan.cuda.chunked failed"
  timeout -k 10 240 "${KS[@]}" eval selective_scan "$OUT/selective_scan-best.py" --backend mlx-cuda \
    --baseline naive --json > "$OUT/selective_scan-eval-best.json"
  "$PY" -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r.get("status"), r.get("score"))' \
    "$OUT/selective_scan-eval-best.json"
}

eval_phases() {
  # Each task judged three times by one evaluator, as a search does: the first evaluation also starts the reference
  # worker and times the baselines; the later ones show what a search pays per candidate.
  local task
  for task in softmax attention gqa_decode; do
    timeout -k 10 180 "$PY" benchmarks/eval_phases.py "$task" mlx-cuda --repeat 3 --out "$OUT" 2>&1 \
      | tee "$OUT/$task-eval-phases.txt" | grep "==" | cut -c1-200
  done
}

fidelity() {
  # The harness's timings against a plain side-by-side loop, per task (pytest asserts 10%; the JSON per task stays).
  local tasks=("$@")
  [ ${#tasks[@]} -gt 0 ] || tasks=(softmax rmsnorm attention gqa_decode selective_scan selective_state_update)
  local sel
  sel=$(printf ' or %s' "${tasks[@]}")
  KSEARCH_BENCH_OUT="$OUT" timeout -k 10 570 "$PY" -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu_harness.py \
    -k "${sel:4}" 2>&1 | tee "$OUT/fidelity-tests.log" | tail -15
}

null_containment() {
  local task=${1:-gqa_decode} setting
  for setting in auto off no-landlock no-namespaces; do
    echo "KSEARCH_SANDBOX=$setting"
    KSEARCH_SANDBOX=$setting timeout -k 10 130 "${KS[@]}" bench fidelity --backend mlx-cuda --tasks "$task" --null \
      --processes 3 --out "$OUT/null-$setting" 2>&1 | grep -E "speedup|candidate" | cut -c1-130
  done
}

harness_loop() {
  local tasks=${1:-selective_state_update,gqa_decode}
  timeout -k 10 400 "$PY" benchmarks/harness_conditions.py --tasks "$tasks" --calls 60 --worker-loop --only-extra \
    --stem harness-conditions-worker-loop --out "$OUT" 2>&1 | tee "$OUT/harness-loop.log" | grep "loop:" | cut -c1-150
}

ncu_part() {
  command -v ncu >/dev/null || die "ncu (Nsight Compute) is not on this machine"
  # Locked base clocks: cycles and stall reasons compare configurations, durations do not compare with bench figures.
  timeout -k 10 540 "$PY" benchmarks/ncu_prefill.py "$OUT" "$@" 2>&1 | tee "$OUT/ncu-prefill.log" | cut -c1-160
}

latest_run() { ls -dt "$RUNS"/*-"$1"-* 2>/dev/null | head -1; }
find_run() {  # a run directory, the name of one under $RUNS, or a run-NAME.tar.gz that `record` wrote (unpacked there)
  local run=$1 name
  if [ -f "$run" ] && [[ "$run" == *.tar.gz ]]; then
    name=$(tar -tzf "$run" 2>/dev/null | head -1 | cut -d/ -f1)
    # grep without -q reads the whole listing: an early exit would end tar by SIGPIPE, a failure under pipefail
    [ -n "$name" ] && tar -tzf "$run" | grep -x "$name/run.db" >/dev/null \
      || die "no run in $1: give a run-NAME.tar.gz that 'record' wrote"
    mkdir -p "$RUNS" && tar -xzf "$run" -C "$RUNS" || die "cannot unpack $1 into $RUNS"
    run=$RUNS/$name
  fi
  [ -f "$run/run.db" ] || run=$RUNS/$(basename "$run")
  [ -f "$run/run.db" ] || die "no run at $1 (nor under $RUNS)"
  echo "$run"
}
run_task() { "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["task"])' "$1/config.json"; }

record() {
  local run task
  run=$(find_run "${1:?record RUN}") || exit 2
  task=$(run_task "$run")
  "${KS[@]}" bench search-summary "$run" --out "$OUT" 2>&1 | tail -2
  "${KS[@]}" report "$run" --evaluations > "$OUT/search-$task-evals.txt" 2>&1
  tail -n 40 "$OUT/search-$task-evals.txt"
  # The run itself, to go on with on another machine: `resume run-NAME.tar.gz` (the machine's $RUNS goes with it).
  tar -czf "$OUT/run-$(basename "$run").tar.gz" -C "$(dirname "$run")" "$(basename "$run")"
}

confirm() {
  local run task
  run=$(find_run "${1:?confirm RUN [TOP] [TIMES]}") || exit 2
  task=$(run_task "$run")
  local adopt=()
  [ -n "${ADOPT:-}" ] && adopt=(--adopt)  # the pick as the run's result, its holdout judged again
  timeout -k 10 540 "${KS[@]}" confirm "$run" --top "${2:-3}" --times "${3:-3}" ${adopt[@]+"${adopt[@]}"} 2>&1 \
    | tee "$OUT/search-$task-confirm.log" | tail -12
  # Its result: confirm.json where adopted (the run's confirmation now), else confirm-later.json beside the run's own.
  local kept
  kept=$(ls -t "$run/confirm-later.json" "$run/confirm.json" 2>/dev/null | head -1)
  [ -n "$kept" ] && cp "$kept" "$OUT/search-$task-confirm.json"
}

profile_capture() {
  command -v ncu >/dev/null || echo "gpu_suite: ncu is not on PATH; the capture records why there are no counters"
  local task
  for task in gqa_decode attention; do
    KSEARCH_NCU_KEEP="$OUT/ncu" timeout -k 10 280 "${KS[@]}" eval "$task" "src/ksearch/tasks/starters/${task}_cuda.py" \
      --backend mlx-cuda --profile --json > "$OUT/profile-$task.json" 2> "$OUT/profile-$task.err"
    "$PY" -c "import json,sys; p=json.load(open(sys.argv[1])).get('profile') or {}; print(sys.argv[2], p.get('status'), p.get('note') or p.get('summary'))" "$OUT/profile-$task.json" "$task"
  done
  ls -la "$OUT/ncu" 2>/dev/null
}

profile_feedback() {
  # One arm a call (best, then off): each fits the 10 minutes; `profile-feedback merge` joins the parts.
  [ $# -ge 1 ] || die "profile-feedback TASK [BUDGET] [best|off], or profile-feedback merge"
  if [ "$1" = merge ]; then
    "$PY" benchmarks/profile_feedback.py --merge "$OUT"/profile-feedback-part-*.json --out "$OUT" 2>&1 | tail -3
    return
  fi
  local modes=(best off)
  [ $# -ge 3 ] && modes=("$3")
  local m
  for m in "${modes[@]}"; do
    timeout -k 10 580 "$PY" benchmarks/profile_feedback.py --tasks "$1" --budget "${2:-16}" --modes "$m" \
      --stem "profile-feedback-part-$1-$m" --out "$OUT" --runs-dir "$RUNS" 2>&1 | tail -5
  done
}

selection_rules() {
  local task=${1:?selection-rules TASK [BUDGET] [SEED...]} budget=${2:-60}
  shift; [ $# -gt 0 ] && shift
  local seeds=("$@")
  [ ${#seeds[@]} -gt 0 ] || seeds=(1)
  mkdir -p "$RUNS"
  local verdicts=${VERDICTS:-$RUNS/verdicts-$task.jsonl} result=${RESULT:-$RUNS/selection-rules-$task.json}
  local resume=()
  [ -f "$result" ] && resume=(--resume "$result")
  timeout -k 15 560 "$PY" benchmarks/selection_rules.py --tasks "$task" --seeds "${seeds[@]}" --budget "$budget" \
    --backend mlx-cuda --share-verdicts "$verdicts" --runs-dir "$RUNS/selection-$task" --out "$RUNS/out-$task" \
    ${resume[@]+"${resume[@]}"} 2>&1 | tail -12
  local written
  written=$(ls -t "$RUNS/out-$task"/selection-rules-gpu-*.json 2>/dev/null | head -1)
  [ -n "$written" ] && cp "$written" "$result"
  cp "$verdicts" "$OUT/" 2>/dev/null
  [ -f "$result" ] && cp "$result" "$OUT/"
}

search() {
  local task=${1:?search TASK WALL_S [CALL_S]} wall=${2:?search TASK WALL_S [CALL_S]}
  local call=${3:-$(( wall + 60 < 540 ? wall + 60 : 540 ))}
  mkdir -p "$RUNS"
  # SIGTERM at CALL_S stops the run cleanly (resumable); at WALL_S it ends by itself and judges its best on the holdout.
  # Its best timed again only where asked (CONFIRM_TOP): the `confirm` part does it in a call of its own.
  timeout -k 15 "$call" "${KS[@]}" run "$task" --backend mlx-cuda --budget "${BUDGET:-120}" --wall-time "$wall" \
    --confirm-top "${CONFIRM_TOP:-0}" \
    --runs-dir "$RUNS" --quiet 2>&1 | tail -14
  record "$(latest_run "$task")"
}

resume() {
  local run call=${2:-540} wall=()
  run=$(find_run "${1:?resume RUN [CALL_S] [WALL_S]}") || exit 2
  # A run that ended on its wall time goes on only with a larger one (ksearch refuses it otherwise, in one line).
  [ -n "${3:-}" ] && wall=(--wall-time "$3")
  timeout -k 15 "$call" "${KS[@]}" run --resume "$run" ${wall[@]+"${wall[@]}"} --quiet 2>&1 | tail -24
  record "$run"
}

holdout() {
  local run task
  run=$(find_run "${1:?holdout RUN}") || exit 2
  task=$(run_task "$run")
  timeout -k 10 400 "${KS[@]}" eval "$task" "$run/best.py" --backend mlx-cuda --holdout 2>&1 \
    | tee "$OUT/search-$task-best-holdout.txt" | tail -20
}

part=${1:-}
[ $# -gt 0 ] && shift
case "$part" in
  stage) stage ;;
  tests) setup && run_tests "$@" ;;
  prefill) setup && prefill ;;
  prefill-calls) setup && prefill_calls ;;
  prefill-configs) setup && prefill_configs "$@" ;;
  prefill-candidates) [ $# -gt 0 ] || die "prefill-candidates: name wgmma configurations, e.g. ws2_n128_s3_p4_tmas_pst_qn"
    refuse_bad_names prefill-candidates ksearch.kernels.attention.wgmma_ws parse_config "$@"
    setup && prefill_candidates "$@" ;;
  prefill-variant) [ $# -gt 0 ] || die "prefill-variant: name variants of the dispatch, e.g. dispatch-r1"
    for calls in ${KSEARCH_VARIANT_CALLS:-}; do
      case "$calls" in chained|independent) ;; *) die "KSEARCH_VARIANT_CALLS: '$calls' is not chained or independent" ;;
      esac
    done
    refuse_bad_names prefill-variant ksearch.kernels.attention.dispatch_variant parse_dispatch_variant "$@"
    setup && prefill_variant "$@" ;;
  prefill-small) setup && prefill_small ;;
  prefill-fp32) setup && prefill_fp32 ;;
  prefill-power) log=prefill-power; case " $* " in *" --causal "*) log=prefill-power-causal ;; esac
    setup && timeout -k 10 500 "$PY" benchmarks/prefill_power.py "$OUT" "$@" 2>&1 | tee "$OUT/$log.log" ;;
  tile-ceiling) setup && timeout -k 10 300 "$PY" benchmarks/wgmma_tile_ceiling.py "$OUT" --tiles 20000 "$@" 2>&1 \
          | tee "$OUT/wgmma-tile-ceiling.log" ;;
  item-trace) setup && timeout -k 10 500 "$PY" benchmarks/prefill_item_trace.py "$OUT" "$@" 2>&1 \
          | tee "$OUT/prefill-item-trace.log" | cut -c1-400 ;;
  decode) setup && decode ;;
  bench-decode) setup && timeout -k 10 300 "${KS[@]}" bench decode --out "$OUT" "$@" 2>&1 | tail -15 ;;
  decode-versus-native) setup && timeout -k 10 500 "$PY" benchmarks/attention_gpu.py versus-native "$OUT" "$@" 2>&1 \
                          | tee "$OUT/decode-versus-native.log" | tail -16 ;;
  decode-power) setup && { [ $# -gt 0 ] || set -- ring=0 mma; } \
          && timeout -k 10 300 "$PY" benchmarks/decode_power.py "$OUT" --configs "$@" 2>&1 \
          | tee "$OUT/decode-power.log" | tail -30 ;;
  decode-cluster) setup && decode_cluster ;;
  mamba) setup && mamba ;;
  scan) setup && scan ;;
  naive) setup && timeout -k 10 560 "${KS[@]}" bench naive --backend mlx-cuda --out "$OUT" 2>&1 | tail -12 ;;
  eval-phases) setup && eval_phases ;;
  fidelity) setup && fidelity "$@" ;;
  null-containment) setup && null_containment "$@" ;;
  harness-loop) setup && harness_loop "$@" ;;
  baseline-spread) setup && timeout -k 10 540 "$PY" benchmarks/baseline_spread.py --backend mlx-cuda \
          --tasks "${1:-gqa_decode}" --evaluators "${2:-6}" --processes 1,3 --out "$OUT" 2>&1 \
          | tee "$OUT/baseline-spread.txt" | cut -c1-150 ;;
  between-runs) setup && timeout -k 10 300 "$PY" benchmarks/between_runs.py --backend mlx-cuda \
          --tasks "${1:-softmax,gqa_decode,selective_state_update}" --out "$OUT" 2>&1 | tee "$OUT/between-runs.txt" \
          | cut -c1-130 ;;
  process-spread) setup && timeout -k 10 420 "$PY" benchmarks/process_spread.py --backend mlx-cuda \
          --tasks "${1:-gqa_decode,selective_state_update,softmax}" --processes 4 --out "$OUT" 2>&1 \
          | tee "$OUT/process-spread.txt" | cut -c1-150 ;;
  gaps) setup && for t in "${@:-gqa_decode}"; do
          timeout -k 10 150 "$PY" benchmarks/harness_gaps.py "$t" --backend mlx-cuda --out "$OUT" 2>&1 \
            | tee "$OUT/harness-gaps-$t.txt" | tail -4
        done ;;
  ncu) setup && ncu_part "$@" ;;
  profile-capture) setup && profile_capture ;;
  profile-feedback) setup && profile_feedback "$@" ;;
  selection-rules) setup && selection_rules "$@" ;;
  search) setup && search "$@" ;;
  resume) run=$(find_run "${1:?resume RUN [CALL_S] [WALL_S]}") || exit 2  # an archive is unpacked before any set-up
    shift; setup && resume "$run" "$@" ;;
  record) setup && record "$@" ;;
  holdout) setup && holdout "$@" ;;
  confirm) run=$(find_run "${1:?confirm RUN [TOP] [TIMES]}") || exit 2  # an archive is unpacked before any set-up
    shift; setup && confirm "$run" "$@" ;;
  *) sed -n '2,/^set -uo/p' "$0" | sed '$d' | cut -c3-; [ -z "$part" ] || die "unknown part: $part" ;;
esac
# What the part left for the trip back (none where nothing was written: `stage`, the usage; their status stays 0)
if [ -d "$OUT" ]; then ls -la "$OUT" | tail -n +2; fi
