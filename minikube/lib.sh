# shellcheck shell=bash
# Shared helpers of the minikube scripts (sourced, not run).
#
# Environment:
#   SHOAL_MINIKUBE_PROFILE  minikube profile, also the kubectl context (default: shoal)
#   SHOAL_IMAGE_TAG         tag of both images (default: the workspace version in
#                           Cargo.toml, as in manifests/ and the Helm chart)
#   SHOAL_INSTALL_SCOPE     cluster (default: manifests/, the controller in
#                           shoal-system for every namespace) or namespace
#                           (manifests/namespaced/: the controller in shoal-demo,
#                           for that namespace only)

# The version of [workspace.package] in Cargo.toml: the tag manifests/ uses.
workspace_version() {
  sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"$/\1/p' \
    "$(dirname "${BASH_SOURCE[0]}")/../Cargo.toml"
}

SHOAL_PROFILE="${SHOAL_MINIKUBE_PROFILE:-shoal}"
SHOAL_MANIFEST_TAG="$(workspace_version)"
SHOAL_TAG="${SHOAL_IMAGE_TAG:-$(workspace_version)}"
SHOAL_DEMO_NAMESPACE="shoal-demo"
SHOAL_SCOPE="${SHOAL_INSTALL_SCOPE:-cluster}"
case "$SHOAL_SCOPE" in
  cluster) SHOAL_CONTROLLER_NAMESPACE="shoal-system" ;;
  namespace) SHOAL_CONTROLLER_NAMESPACE="$SHOAL_DEMO_NAMESPACE" ;;
  *)
    printf '\nerror: SHOAL_INSTALL_SCOPE is %s; use cluster or namespace\n' "$SHOAL_SCOPE" >&2
    exit 1
    ;;
esac
# The repository root: every script runs from there, so relative paths
# (manifests/, controller/Dockerfile) mean the same to every tool.
SHOAL_REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export SHOAL_PROFILE SHOAL_TAG SHOAL_MANIFEST_TAG SHOAL_DEMO_NAMESPACE SHOAL_SCOPE SHOAL_CONTROLLER_NAMESPACE SHOAL_REPO

# Says which step runs next.
step() {
  printf '\n==> %s\n' "$*"
}

# Stops the script with a message on stderr.
die() {
  printf '\nerror: %s\n' "$*" >&2
  exit 1
}

# Prints a command, runs it, and stops the script loudly if it fails.
run() {
  printf '+ %s\n' "$*"
  "$@" || die "this command failed (exit $?): $*"
}

# kubectl against the minikube profile's context, never whatever context
# happens to be current.
k() {
  run kubectl --context "$SHOAL_PROFILE" "$@"
}

# Checks that every named program is on PATH.
require() {
  local program
  for program in "$@"; do
    command -v "$program" >/dev/null 2>&1 || die "$program is not installed or not on PATH (see docs/src/how-to/install-minikube.md, prerequisites)"
  done
}

# Fails with the script name and line of any command that fails outside run().
trap 'printf "\nerror: %s failed at line %s\n" "${BASH_SOURCE[0]}" "$LINENO" >&2' ERR

cd "$SHOAL_REPO" || die "cannot enter the repository root $SHOAL_REPO"
