#!/usr/bin/env bash
# run-step.sh PLAYBOOK ANSIBLE_PLAYBOOK ARGS...: runs one step playbook. On SIGINT or SIGTERM it stops
# ansible-playbook and its workers, then runs interrupted.yml (beside PLAYBOOK) with the same arguments, which
# removes on every host the containers the step started (a measuring step's folder gets an interrupted.json
# saying so); exits 130 (SIGINT) or 143 (SIGTERM).
set -u
playbook=$1
ansible_playbook=$2
shift 2
step=$(basename "$playbook" .yml)
set -m # ansible-playbook in its own process group: the signal reaches this script, which stops it
"$ansible_playbook" "$playbook" "$@" &
pid=$!
interrupted() {
  local status=$1
  shift
  trap '' INT TERM
  kill -TERM -- "-$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  echo "interrupted: removing the containers $step started, on every host" >&2
  "$ansible_playbook" "$(dirname "$playbook")/interrupted.yml" "$@" -e "kdakit_step=$step" \
    -e "kdakit_interrupt_signal=$([ "$status" = 130 ] && echo SIGINT || echo SIGTERM)" >/dev/null 2>&1 ||
    echo "interrupted: the cleanup of $step failed on some host; run make teardown" >&2
  exit "$status"
}
# "$@" inside the handler is the handler's own: keep the playbook's arguments for it
args=("$@")
trap 'interrupted 130 "${args[@]}"' INT
trap 'interrupted 143 "${args[@]}"' TERM
wait "$pid"
