#!/usr/bin/env bash
# Installs Shoal (manifests/: CRD, namespace, RBAC, controller; manifests/admission/:
# the admission policies, on Kubernetes 1.30+) and the
# example (manifests/example/: a Swarm with seed 002's 27 streams and its
# worker StatefulSet), then waits until both run.
set -euo pipefail
# shellcheck source=minikube/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

require kubectl

step "installing Shoal: kubectl apply -k manifests/"
k apply -k manifests/

step "waiting for the Swarm CRD to be established"
k wait --for=condition=Established crd/swarms.shoal.dev --timeout=60s

if [ "$SHOAL_TAG" != dev ]; then
  step "using image tag $SHOAL_TAG"
  k -n shoal-system set image deployment/shoal-controller "controller=shoal-controller:$SHOAL_TAG"
fi

step "waiting for the controller Deployment (2 replicas, one leader)"
k -n shoal-system rollout status deployment/shoal-controller --timeout=180s

step "current leader (Lease shoal-system/shoal-controller)"
k -n shoal-system get lease shoal-controller -o 'jsonpath={.spec.holderIdentity}{"\n"}'

# ValidatingAdmissionPolicy is GA from Kubernetes 1.30: a member may then write
# only its own Lease, and only the controller the ConfigMaps Shoal owns.
if k api-resources --api-group=admissionregistration.k8s.io -o name | grep -q '^validatingadmissionpolicies'; then
  step "installing the admission policies: kubectl apply -k manifests/admission/"
  k apply -k manifests/admission/
else
  step "this cluster has no ValidatingAdmissionPolicy (Kubernetes < 1.30): skipping manifests/admission/"
fi

step "installing the example: kubectl apply -k manifests/example/"
k apply -k manifests/example/

if [ "$SHOAL_TAG" != dev ]; then
  k -n "$SHOAL_DEMO_NAMESPACE" set image statefulset/swarm-worker "shoal-worker=shoal-worker:$SHOAL_TAG"
fi

step "waiting for the worker StatefulSet"
k -n "$SHOAL_DEMO_NAMESPACE" rollout status statefulset/swarm-worker --timeout=180s

step "waiting for the Swarm to be Ready"
k -n "$SHOAL_DEMO_NAMESPACE" wait --for=jsonpath='{.status.phase}'=Ready swarm/demo --timeout=120s
k -n "$SHOAL_DEMO_NAMESPACE" get swarm demo

step "done; next: minikube/demo.sh"
