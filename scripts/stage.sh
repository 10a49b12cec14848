# Sourced by the device scripts (gpu_check.sh, shm_many_ranks.sh, device_round.sh): one stage of a run on a lent
# machine, with its own time limit, so one hang costs that stage only. Its whole log is
# $LOG/NAME.log; the last $TAIL lines (default 15) are printed.
stage() {  # stage NAME SECONDS COMMAND...
  local name=$1 limit=$2 t0=$SECONDS rc
  shift 2
  echo "== $name"
  timeout -k 10 "$limit" "$@" >"$LOG/$name.log" 2>&1
  rc=$?
  echo "== $name: rc=$rc, $((SECONDS - t0)) s"
  tail -n "${TAIL:-15}" "$LOG/$name.log"
}
