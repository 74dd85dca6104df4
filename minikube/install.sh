#!/usr/bin/env bash
# Installs Shoal (manifests/: CRD, namespace, RBAC, controller; manifests/admission/:
# the admission policies, on Kubernetes 1.30+) and the
# example (manifests/example/: a Swarm with seed 002's 27 streams and its
# worker StatefulSet), then waits until both run.
#
# SHOAL_INSTALL_SCOPE=namespace installs the namespace-scoped variant instead
# (manifests/namespaced/: the controller in shoal-demo with a Role there;
# manifests/namespaced/cluster-admin/: the cluster-scoped part).
set -euo pipefail
# shellcheck source=minikube/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

require kubectl

# ValidatingAdmissionPolicy is GA from Kubernetes 1.30: a member may then write
# only its own Lease, and only the controller the ConfigMaps Shoal owns.
has_admission_policies() {
  kubectl --context "$SHOAL_PROFILE" api-resources --api-group=admissionregistration.k8s.io -o name |
    grep -q '^validatingadmissionpolicies'
}

if [ "$SHOAL_SCOPE" = namespace ]; then
  step "as the cluster administrator: the CRD, then manifests/namespaced/cluster-admin/ (roles, admission policies, namespace)"
  k apply -f manifests/crd.yaml -f manifests/crd-deploymentplan.yaml
  k wait --for=condition=Established crd/swarms.shoal.dev crd/deploymentplans.shoal.dev --timeout=60s
  has_admission_policies ||
    die "this cluster has no ValidatingAdmissionPolicy (Kubernetes < 1.30), which manifests/namespaced/cluster-admin/ includes; use SHOAL_INSTALL_SCOPE=cluster"
  k apply -k manifests/namespaced/cluster-admin/
  step "as the namespace's owner: kubectl apply -k manifests/namespaced/"
  k apply -k manifests/namespaced/
else
  step "installing Shoal: kubectl apply -k manifests/"
  k apply -k manifests/

  step "waiting for the Swarm CRD to be established"
  k wait --for=condition=Established crd/swarms.shoal.dev --timeout=60s
fi

if [ "$SHOAL_TAG" != "$SHOAL_MANIFEST_TAG" ]; then
  step "using image tag $SHOAL_TAG"
  k -n "$SHOAL_CONTROLLER_NAMESPACE" set image deployment/shoal-controller "controller=shoal-controller:$SHOAL_TAG"
fi

step "waiting for the controller Deployment (2 replicas, one leader)"
k -n "$SHOAL_CONTROLLER_NAMESPACE" rollout status deployment/shoal-controller --timeout=180s

step "current leader (Lease $SHOAL_CONTROLLER_NAMESPACE/shoal-controller)"
k -n "$SHOAL_CONTROLLER_NAMESPACE" get lease shoal-controller -o 'jsonpath={.spec.holderIdentity}{"\n"}'

if [ "$SHOAL_SCOPE" = namespace ]; then
  step "installing the example: kubectl apply -k manifests/namespaced/example/"
  k apply -k manifests/namespaced/example/
else
  if has_admission_policies; then
    step "installing the admission policies: kubectl apply -k manifests/admission/"
    k apply -k manifests/admission/
  else
    step "this cluster has no ValidatingAdmissionPolicy (Kubernetes < 1.30): skipping manifests/admission/"
  fi

  step "installing the example: kubectl apply -k manifests/example/"
  k apply -k manifests/example/
fi

if [ "$SHOAL_TAG" != "$SHOAL_MANIFEST_TAG" ]; then
  k -n "$SHOAL_DEMO_NAMESPACE" set image statefulset/swarm-worker "shoal-worker=shoal-worker:$SHOAL_TAG"
fi

step "waiting for the worker StatefulSet"
k -n "$SHOAL_DEMO_NAMESPACE" rollout status statefulset/swarm-worker --timeout=180s

step "waiting for the Swarm to be Ready"
k -n "$SHOAL_DEMO_NAMESPACE" wait --for=jsonpath='{.status.phase}'=Ready swarm/demo --timeout=120s
k -n "$SHOAL_DEMO_NAMESPACE" get swarm demo

step "done; next: minikube/demo.sh"
