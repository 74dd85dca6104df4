#!/usr/bin/env bash
# Removes the example and Shoal, then deletes the minikube profile.
# SHOAL_KEEP_CLUSTER=1 keeps the cluster (uninstall only); SHOAL_INSTALL_SCOPE as
# for install.sh.
set -euo pipefail
# shellcheck source=minikube/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

require minikube kubectl

if minikube -p "$SHOAL_PROFILE" status >/dev/null 2>&1; then
  if [ "$SHOAL_SCOPE" = namespace ]; then
    step "removing the example and the namespace-scoped controller"
    k delete -k manifests/namespaced/example/ --ignore-not-found --wait=true
    k delete -k manifests/namespaced/ --ignore-not-found --wait=true
    step "removing the cluster-scoped part (roles, admission policies, namespace $SHOAL_DEMO_NAMESPACE) and the CRD"
    k delete -k manifests/namespaced/cluster-admin/ --ignore-not-found --wait=true
    k delete -f manifests/crd.yaml -f manifests/crd-deploymentplan.yaml --ignore-not-found --wait=true
  else
    step "removing the example (namespace $SHOAL_DEMO_NAMESPACE)"
    k delete -k manifests/example/ --ignore-not-found --wait=true
    step "removing the admission policies"
    k delete -k manifests/admission/ --ignore-not-found --wait=true
    step "removing Shoal (controller, RBAC, namespace, CRD)"
    k delete -k manifests/ --ignore-not-found --wait=true
  fi
else
  step "minikube profile $SHOAL_PROFILE is not running; nothing to uninstall"
fi

if [ "${SHOAL_KEEP_CLUSTER:-0}" = 1 ]; then
  step "keeping the cluster (SHOAL_KEEP_CLUSTER=1)"
else
  step "deleting minikube profile $SHOAL_PROFILE"
  run minikube delete -p "$SHOAL_PROFILE"
fi
