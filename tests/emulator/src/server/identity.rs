//! Who made a request. Authentication fills it in; authorization and
//! admission (ValidatingAdmissionPolicy's `request.userInfo`) read it.

use std::collections::BTreeMap;

/// The user a request was authenticated as, in the shape of the Kubernetes
/// `authentication.k8s.io/v1` `UserInfo`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UserInfo {
    /// e.g. `system:admin`, `system:serviceaccount:<namespace>:<name>`.
    pub username: String,
    /// Stable identifier of the user (a ServiceAccount's uid), may be empty.
    pub uid: String,
    /// Groups, e.g. `system:masters`, `system:authenticated`.
    pub groups: Vec<String>,
    /// Extra attributes, e.g. `authentication.kubernetes.io/pod-name` for a
    /// token bound to a pod.
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// The cluster administrator the default kubeconfig authenticates as.
    pub fn admin() -> UserInfo {
        UserInfo {
            username: "system:admin".to_owned(),
            uid: String::new(),
            groups: vec![
                "system:masters".to_owned(),
                "system:authenticated".to_owned(),
            ],
            extra: BTreeMap::new(),
        }
    }
}
