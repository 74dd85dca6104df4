//! Authentication as a real API server does it, as far as Shoal and kubectl
//! rely on it: bearer tokens (the administrator's from the kubeconfig, and
//! ServiceAccount tokens from the TokenRequest API, optionally bound to a
//! pod), anonymous requests, and impersonation (`kubectl --as`).
//!
//! A ServiceAccount token carries the user a real server gives it
//! (`system:serviceaccount:<ns>:<name>`, its groups) and, bound to a pod, the
//! `authentication.kubernetes.io/pod-name` and `pod-uid` extras that
//! admission policies read. It stops working when its ServiceAccount or its
//! pod is gone, or when it expires.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use http::HeaderMap;
use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

use super::errors::ApiError;
use super::identity::UserInfo;
use super::store::{ObjectKey, Store};

/// Extra key a pod-bound token carries: the pod's name.
pub const POD_NAME_EXTRA: &str = "authentication.kubernetes.io/pod-name";
/// Extra key a pod-bound token carries: the pod's uid.
pub const POD_UID_EXTRA: &str = "authentication.kubernetes.io/pod-uid";
/// Default lifetime of a requested token (a real server's default is one hour).
const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;
/// Shortest lifetime a TokenRequest may ask for (as on a real server).
const MIN_EXPIRATION_SECONDS: i64 = 600;

/// What a token stands for.
#[derive(Debug, Clone)]
enum Credential {
    /// The cluster administrator of the kubeconfig.
    Admin,
    /// A ServiceAccount, optionally bound to a pod.
    ServiceAccount {
        namespace: String,
        name: String,
        uid: String,
        pod: Option<(String, String)>,
        expires: Timestamp,
    },
}

/// The tokens the server accepts.
#[derive(Debug)]
pub struct Tokens {
    admin: String,
    issued: Mutex<HashMap<String, Credential>>,
}

impl Tokens {
    /// A token table with a fresh administrator token.
    pub fn new(admin: String) -> Tokens {
        let issued = HashMap::from([(admin.clone(), Credential::Admin)]);
        Tokens {
            admin,
            issued: Mutex::new(issued),
        }
    }

    /// The administrator's token (written into the kubeconfig).
    pub fn admin(&self) -> &str {
        &self.admin
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Credential>> {
        self.issued
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The user a bearer token stands for now, or why it stands for nobody.
    pub fn user_of(&self, token: &str, store: &Store) -> Result<UserInfo, String> {
        let credential = self
            .lock()
            .get(token)
            .cloned()
            .ok_or_else(|| "unknown token".to_owned())?;
        match credential {
            Credential::Admin => Ok(UserInfo::admin()),
            Credential::ServiceAccount {
                namespace,
                name,
                uid,
                pod,
                expires,
            } => {
                if expires < Timestamp::now() {
                    return Err("token expired".to_owned());
                }
                let account = store.get(&ObjectKey::new("", "serviceaccounts", &namespace, &name));
                if account
                    .as_deref()
                    .and_then(|object| object["metadata"]["uid"].as_str())
                    != Some(uid.as_str())
                {
                    return Err(format!("service account {namespace}/{name} is gone"));
                }
                if let Some((pod_name, pod_uid)) = &pod {
                    let live = store.get(&ObjectKey::new("", "pods", &namespace, pod_name));
                    if live
                        .as_deref()
                        .and_then(|object| object["metadata"]["uid"].as_str())
                        != Some(pod_uid.as_str())
                    {
                        return Err(format!(
                            "pod {namespace}/{pod_name} the token is bound to is gone"
                        ));
                    }
                }
                Ok(service_account_user(&namespace, &name, &uid, pod.as_ref()))
            }
        }
    }

    /// Issues a token for a ServiceAccount (`serviceaccounts/token`), returning the
    /// TokenRequest response body.
    pub fn request(
        &self,
        store: &mut Store,
        namespace: &str,
        account: &str,
        request: &Value,
    ) -> Result<Value, ApiError> {
        let stored = store
            .get(&ObjectKey::new("", "serviceaccounts", namespace, account))
            .ok_or_else(|| ApiError::not_found("", "serviceaccounts", account))?;
        let uid = stored["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let spec = &request["spec"];
        let seconds = spec["expirationSeconds"]
            .as_i64()
            .unwrap_or(DEFAULT_EXPIRATION_SECONDS);
        if seconds < MIN_EXPIRATION_SECONDS {
            return Err(ApiError::unprocessable(format!(
                "TokenRequest.authentication.k8s.io \"{account}\" is invalid: spec.expirationSeconds: Invalid value: {seconds}: may not specify a duration less than 10 minutes"
            )));
        }
        let pod = match spec["boundObjectRef"].as_object() {
            None => None,
            Some(bound) => {
                let kind = bound
                    .get("kind")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if kind != "Pod" {
                    return Err(ApiError::unprocessable(format!(
                        "TokenRequest.authentication.k8s.io \"{account}\" is invalid: spec.boundObjectRef.kind: Unsupported value: \"{kind}\": supported values: \"Pod\""
                    )));
                }
                let pod_name = bound
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let pod = store
                    .get(&ObjectKey::new("", "pods", namespace, pod_name))
                    .ok_or_else(|| ApiError::not_found("", "pods", pod_name))?;
                let pod_uid = pod["metadata"]["uid"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                if let Some(wanted) = bound.get("uid").and_then(Value::as_str)
                    && !wanted.is_empty()
                    && wanted != pod_uid
                {
                    return Err(ApiError::conflict_with(
                        "",
                        "pods",
                        pod_name,
                        &format!(
                            "the UID in the bound object reference ({wanted}) does not match the UID in record. The object might have been deleted and then recreated"
                        ),
                    ));
                }
                Some((pod_name.to_owned(), pod_uid))
            }
        };
        let token = format!(
            "sa-{:016x}{:016x}",
            store.next_random(),
            store.next_random()
        );
        let expires = Timestamp::now() + SignedDuration::from_secs(seconds);
        self.lock().insert(
            token.clone(),
            Credential::ServiceAccount {
                namespace: namespace.to_owned(),
                name: account.to_owned(),
                uid,
                pod,
                expires,
            },
        );
        let mut response = request.clone();
        response["apiVersion"] = json!("authentication.k8s.io/v1");
        response["kind"] = json!("TokenRequest");
        response["metadata"]["name"] = json!(account);
        response["metadata"]["namespace"] = json!(namespace);
        response["spec"]["expirationSeconds"] = json!(seconds);
        response["status"] = json!({
            "token": token,
            "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        });
        Ok(response)
    }
}

/// The user a ServiceAccount token authenticates as.
fn service_account_user(
    namespace: &str,
    name: &str,
    uid: &str,
    pod: Option<&(String, String)>,
) -> UserInfo {
    let mut extra = BTreeMap::new();
    if let Some((pod_name, pod_uid)) = pod {
        extra.insert(POD_NAME_EXTRA.to_owned(), vec![pod_name.clone()]);
        extra.insert(POD_UID_EXTRA.to_owned(), vec![pod_uid.clone()]);
    }
    UserInfo {
        username: format!("system:serviceaccount:{namespace}:{name}"),
        uid: uid.to_owned(),
        groups: vec![
            "system:serviceaccounts".to_owned(),
            format!("system:serviceaccounts:{namespace}"),
            "system:authenticated".to_owned(),
        ],
        extra,
    }
}

/// The anonymous user of a request without credentials.
pub fn anonymous() -> UserInfo {
    UserInfo {
        username: "system:anonymous".to_owned(),
        uid: String::new(),
        groups: vec!["system:unauthenticated".to_owned()],
        extra: BTreeMap::new(),
    }
}

/// 401, as a real server answers a bad credential.
pub fn unauthorized() -> ApiError {
    let mut error = ApiError::forbidden("Unauthorized");
    error.code = 401;
    error.reason = "Unauthorized";
    error
}

/// Who sent a request: its bearer token's user, or the anonymous user.
pub fn authenticate(
    headers: &HeaderMap,
    tokens: &Tokens,
    store: &Store,
) -> Result<UserInfo, ApiError> {
    let Some(value) = headers.get(http::header::AUTHORIZATION) else {
        return Ok(anonymous());
    };
    let token = value
        .to_str()
        .ok()
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::trim)
        .ok_or_else(unauthorized)?;
    tokens.user_of(token, store).map_err(|why| {
        tracing::debug!(why, "authentication failed");
        unauthorized()
    })
}

/// The user a request impersonates (`Impersonate-User`, `-Group`, `-Uid`, `-Extra-*`),
/// if it asks to.
pub fn impersonation(headers: &HeaderMap) -> Option<UserInfo> {
    let user = headers.get("impersonate-user")?.to_str().ok()?.to_owned();
    let groups: Vec<String> = headers
        .get_all("impersonate-group")
        .iter()
        .filter_map(|value| value.to_str().ok().map(str::to_owned))
        .collect();
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, value) in headers {
        if let Some(key) = name.as_str().strip_prefix("impersonate-extra-")
            && let Ok(value) = value.to_str()
        {
            extra
                .entry(percent_decode(key))
                .or_default()
                .push(value.to_owned());
        }
    }
    let uid = headers
        .get("impersonate-uid")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let mut impersonated = match user.strip_prefix("system:serviceaccount:") {
        Some(account) => {
            let (namespace, _) = account.split_once(':').unwrap_or((account, ""));
            let groups = vec![
                "system:serviceaccounts".to_owned(),
                format!("system:serviceaccounts:{namespace}"),
            ];
            UserInfo {
                username: user.clone(),
                uid: uid.clone(),
                groups,
                extra: BTreeMap::new(),
            }
        }
        None => UserInfo {
            username: user.clone(),
            uid: uid.clone(),
            groups: Vec::new(),
            extra: BTreeMap::new(),
        },
    };
    for group in groups {
        if !impersonated.groups.contains(&group) {
            impersonated.groups.push(group);
        }
    }
    if user != "system:anonymous"
        && !impersonated
            .groups
            .iter()
            .any(|g| g == "system:authenticated")
    {
        impersonated.groups.push("system:authenticated".to_owned());
    }
    impersonated.extra = extra;
    Some(impersonated)
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%'
            && index + 2 < bytes.len()
            && let Ok(byte) = u8::from_str_radix(&text[index + 1..index + 3], 16)
        {
            decoded.push(byte);
            index += 3;
            continue;
        }
        decoded.push(bytes[index]);
        index += 1;
    }
    String::from_utf8_lossy(&decoded).into_owned()
}

/// The `authentication.k8s.io/v1` UserInfo document of a user.
pub fn user_info_document(user: &UserInfo) -> Value {
    let mut document = json!({
        "username": user.username,
        "groups": user.groups,
    });
    if !user.uid.is_empty() {
        document["uid"] = json!(user.uid);
    }
    if !user.extra.is_empty() {
        document["extra"] = json!(user.extra);
    }
    document
}
