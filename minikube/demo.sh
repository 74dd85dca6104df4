#!/usr/bin/env bash
# A guided tour mirroring seed 002's k8s-swarm walkthrough: the pods, the
# assignment (`kubectl describe cm`), a member's slice file (`kubectl exec ...
# cat`), scaling the StatefulSet, approving the pending revision, and watching
# the status converge. Run minikube/install.sh first.
#
# SHOAL_DEMO_PAUSE=1 waits for Enter between steps.
set -euo pipefail
# shellcheck source=minikube/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

require kubectl
ns="$SHOAL_DEMO_NAMESPACE"

pause() {
  if [ "${SHOAL_DEMO_PAUSE:-0}" = 1 ]; then
    read -r -p "(press Enter to continue) " _
  fi
}

# Reads one jsonpath of the Swarm quietly (for decisions, not for show).
swarm_field() {
  kubectl --context "$SHOAL_PROFILE" -n "$ns" get swarm demo -o "jsonpath=$1"
}

# Waits until the Swarm's jsonpath $1 equals $2, printing the Swarm as it goes.
wait_for_swarm() {
  local path="$1" wanted="$2" timeout="${3:-180}" waited=0 seen
  while :; do
    seen="$(swarm_field "$path")" || die "cannot read swarm/demo in namespace $ns"
    if [ "$seen" = "$wanted" ]; then
      return 0
    fi
    if [ "$waited" -ge "$timeout" ]; then
      k -n "$ns" describe swarm demo
      die "swarm/demo: $path is '$seen', not '$wanted', after ${timeout}s (see the Events above)"
    fi
    kubectl --context "$SHOAL_PROFILE" -n "$ns" get swarm demo --no-headers || true
    sleep 3
    waited=$((waited + 3))
  done
}

step "the pods: the controller (two replicas, one leader) and the two workers"
if [ "$SHOAL_CONTROLLER_NAMESPACE" != "$ns" ]; then
  k -n "$SHOAL_CONTROLLER_NAMESPACE" get pods -o wide
fi
k -n "$ns" get pods -o wide
pause

step "the Swarm: members ready, jobs, revision in force, pending revision, phase"
wait_for_swarm '{.status.phase}' Ready
k -n "$ns" get swarm demo
pause

step "the assignment, as k8s-swarm showed it: the index ConfigMap (seed 002: kubectl describe cm swarm-worker-config)"
k -n "$ns" describe cm demo
pause

step "one member's slice ConfigMap (what its sidecar watches)"
k -n "$ns" describe cm swarm-worker-0-slice
pause

step "the slice file inside the pod (seed 002: kubectl exec ... cat /app/config/config.yml)"
k -n "$ns" exec swarm-worker-0 -c shoal-worker -- cat /var/run/shoal/slice.yaml
pause

step "the demo consumers running in swarm-worker-0 (one per stream)"
k -n "$ns" logs swarm-worker-0 -c shoal-worker --tail=20
pause

step "switching the Swarm to Manual approval, so the next revision waits for a human"
k -n "$ns" patch swarm demo --type merge -p '{"spec":{"approval":{"policy":"Manual"}}}'
current="$(swarm_field '{.status.currentRevision}')" || die "cannot read the current revision"
echo "revision in force: $current"
pause

if command -v kubectl-shoal >/dev/null 2>&1; then
  step "before anything changes: which streams would move to a third member (kubectl shoal diff)"
  run kubectl-shoal --context "$SHOAL_PROFILE" -n "$ns" diff demo --replicas 3
  pause
else
  echo "(install the kubectl shoal plugin to preview the move first: cargo install --locked --path controller --bin kubectl-shoal)"
fi

step "scaling the StatefulSet to 3 (seed 002: kubectl scale statefulset swarm-worker --replicas=3)"
k -n "$ns" scale statefulset swarm-worker --replicas=3
k -n "$ns" rollout status statefulset/swarm-worker --timeout=180s

step "waiting for the controller to compute the new revision; it waits for approval"
wait_for_swarm '{.status.phase}' AwaitingApproval
pending="$(swarm_field '{.status.pendingRevision.revision}')" || die "cannot read the pending revision"
[ -n "$pending" ] || die "swarm/demo is AwaitingApproval but has no status.pendingRevision"
approve_with="$(swarm_field '{.status.pendingRevision.approveWith}')" || die "cannot read the pending revision's approval value"
[ -n "$approve_with" ] || die "swarm/demo has no status.pendingRevision.approveWith"
echo "pending revision: $pending (approve with shoal.dev/approve=$approve_with)"
k -n "$ns" get swarm demo -o 'jsonpath={.status.pendingRevision.summary}{"\n"}'
k -n "$ns" get events --field-selector involvedObject.name=demo --sort-by=.metadata.creationTimestamp
if command -v kubectl-shoal >/dev/null 2>&1; then
  run kubectl-shoal --context "$SHOAL_PROFILE" -n "$ns" status demo
fi
echo "nothing moved yet: swarm-worker-0 still holds its streams"
k -n "$ns" exec swarm-worker-0 -c shoal-worker -- cat /var/run/shoal/slice.yaml
pause

# An approval names the revision and its hash (status.pendingRevision.approveWith):
# a bare number is refused, so the approval stands for this reviewed plan only.
step "approving revision $pending (what the shoal-approver role may do)"
# The approver names themself beside the approval (admission policy shoal-approved-by).
approver="$(k auth whoami -o 'jsonpath={.status.userInfo.username}')" || die "cannot tell who you are (kubectl auth whoami)"
k -n "$ns" annotate swarm demo "shoal.dev/approve=$approve_with" "shoal.dev/approved-by=$approver" --overwrite

step "watching the status until revision $pending is in force on every member"
wait_for_swarm '{.status.currentRevision}' "$pending"
wait_for_swarm '{.status.phase}' Ready
k -n "$ns" get swarm demo
k -n "$ns" get swarm demo -o 'jsonpath={range .status.members[*]}{.name}{"\t"}{.sliceSize}{" jobs\tacked revision "}{.ackedRevision}{"\n"}{end}'
pause

step "the new member's slice file"
k -n "$ns" exec swarm-worker-2 -c shoal-worker -- cat /var/run/shoal/slice.yaml

step "the assignment after the scale-up"
k -n "$ns" describe cm demo

step "back to Automatic approval"
k -n "$ns" patch swarm demo --type merge -p '{"spec":{"approval":{"policy":"Automatic"}}}'

step "done; minikube/down.sh removes everything"
