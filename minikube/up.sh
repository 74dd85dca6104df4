#!/usr/bin/env bash
# Starts a minikube cluster and builds the shoal-controller and shoal-worker
# images into its image store (no registry involved; the manifests use
# imagePullPolicy: IfNotPresent).
#
# Environment: SHOAL_MINIKUBE_PROFILE, SHOAL_IMAGE_TAG (see lib.sh),
#   SHOAL_MINIKUBE_START_ARGS  extra flags for `minikube start`
#   SHOAL_IMAGE_BUILDER        minikube (default: `minikube image build`) or
#                              docker-env (`docker build` against minikube's
#                              Docker daemon; needs the docker runtime)
set -euo pipefail
# shellcheck source=minikube/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

require minikube kubectl

step "starting minikube (profile $SHOAL_PROFILE)"
# Word splitting of the extra flags is intended.
# shellcheck disable=SC2086
run minikube start -p "$SHOAL_PROFILE" --cpus=2 --memory=4g \
  --kubernetes-version=stable ${SHOAL_MINIKUBE_START_ARGS:-}

step "checking that kubectl reaches the cluster"
k get nodes -o wide

builder="${SHOAL_IMAGE_BUILDER:-minikube}"
build_image() {
  local image="$1" dockerfile="$2"
  step "building $image from $dockerfile inside minikube (compiles Rust in release mode; takes a few minutes)"
  case "$builder" in
    minikube)
      run minikube -p "$SHOAL_PROFILE" image build -t "$image" -f "$dockerfile" .
      ;;
    docker-env)
      require docker
      run docker build -t "$image" -f "$dockerfile" .
      ;;
    *)
      die "SHOAL_IMAGE_BUILDER must be minikube or docker-env, not '$builder'"
      ;;
  esac
}

if [ "$builder" = docker-env ]; then
  step "pointing docker at minikube's Docker daemon"
  env_script="$(minikube -p "$SHOAL_PROFILE" docker-env --shell bash)" \
    || die "minikube docker-env failed; use SHOAL_IMAGE_BUILDER=minikube with a non-docker runtime"
  eval "$env_script"
fi

build_image "shoal-controller:$SHOAL_TAG" controller/Dockerfile
build_image "shoal-worker:$SHOAL_TAG" worker/Dockerfile

step "images now in minikube's store"
minikube -p "$SHOAL_PROFILE" image ls | grep -E 'shoal-(controller|worker)' \
  || die "the shoal images are not in minikube's image store after the build"

step "done; next: minikube/install.sh"
