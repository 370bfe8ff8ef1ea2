# Sourced by the GPU scripts (gpu-check, gpu-engine-check, gpu-offline, gpu-tp-check): one timed,
# logged step of a device call.
#   step NAME TIMEOUT_S CMD...
# runs CMD under `timeout $STEP_TIMEOUT_OPTS TIMEOUT_S` with its output in $STEP_DIR/NAME.log
# (also appended to $STEP_LOG when set, headed by the command), adds a row to the TABLE array
# (name padded to STEP_WIDTH, default 16; a failure says "rc N" and $STEP_FAIL_HINT, where %s is
# the step's name), sets FAILED=1 and prints the log's last 25 lines on failure, and returns CMD's
# status. With STEP_MARKS set, appends "NAME START END" (epoch seconds) to that file, so samples
# logged beside the steps (nvidia-smi's clocks and power) can be split by step.
step() {
  local name=$1 limit=$2
  shift 2
  local t0 rc dt log="$STEP_DIR/$name.log"
  t0=$(date +%s)
  [ -n "${STEP_LOG:-}" ] && echo "== $name: $*" >>"$STEP_LOG"
  # shellcheck disable=SC2086  # the options are words
  timeout ${STEP_TIMEOUT_OPTS:-} "$limit" "$@" >"$log" 2>&1
  rc=$?
  [ -n "${STEP_LOG:-}" ] && cat "$log" >>"$STEP_LOG"
  dt=$(($(date +%s) - t0))
  [ -n "${STEP_MARKS:-}" ] && echo "$name $t0 $(date +%s)" >>"$STEP_MARKS"
  if [ $rc -eq 0 ]; then
    TABLE+=("$(printf "%-${STEP_WIDTH:-16}s %-5s %5ss" "$name" ok "$dt")")
  else
    # shellcheck disable=SC2059  # the hint is a format with the step's name
    TABLE+=("$(printf "%-${STEP_WIDTH:-16}s %-5s %5ss  rc %s" "$name" FAIL "$dt" "$rc")$(printf "${STEP_FAIL_HINT:-}" "$name")")
    FAILED=1
    tail -n 25 "$log"
  fi
  return $rc
}
