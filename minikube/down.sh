#!/usr/bin/env bash
# Removes the example and Shoal, then deletes the minikube profile.
# SHOAL_KEEP_CLUSTER=1 keeps the cluster (uninstall only).
set -euo pipefail
# shellcheck source=minikube/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

require minikube kubectl

if minikube -p "$SHOAL_PROFILE" status >/dev/null 2>&1; then
  step "removing the example (namespace $SHOAL_DEMO_NAMESPACE)"
  k delete -k manifests/example/ --ignore-not-found --wait=true
  step "removing Shoal (controller, RBAC, namespace, CRD)"
  k delete -k manifests/ --ignore-not-found --wait=true
else
  step "minikube profile $SHOAL_PROFILE is not running; nothing to uninstall"
fi

if [ "${SHOAL_KEEP_CLUSTER:-0}" = 1 ]; then
  step "keeping the cluster (SHOAL_KEEP_CLUSTER=1)"
else
  step "deleting minikube profile $SHOAL_PROFILE"
  run minikube delete -p "$SHOAL_PROFILE"
fi
