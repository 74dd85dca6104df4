//! Who is calling and what they may do: a device by its client certificate
//! (see [`super::identity`]), anyone else by a bearer token the API server
//! checks (a TokenReview); the permission, for both alike, through a SubjectAccessReview
//! on the plan's `deploymentplans/deploymentstatus` (verb `get` to read,
//! `update` to report).
//!
//! What goes wrong inside (the API server unreachable, a review refused) is
//! logged, never sent to the caller: a 503 says only which check failed.

use axum::http::{HeaderMap, StatusCode, header};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};

use super::identity::{ClientCertificate, DeviceIdentity};
use super::problem::Problem;

/// The subresource permissions name: `deploymentplans/deploymentstatus`.
pub const SUBRESOURCE: &str = "deploymentstatus";

/// The bearer token of `headers`, if any.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

fn unavailable(what: &str, error: kube::Error) -> Problem {
    tracing::warn!(%error, "deployment status endpoint: {what} failed");
    Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("{what} failed; try again later"),
    )
}

/// An authenticated caller: the user RBAC sees, and the device its client
/// certificate names (none for a bearer token's).
#[derive(Clone, Debug)]
pub struct Caller {
    /// The user the SubjectAccessReview asks about.
    pub user: UserInfo,
    /// The device, when the caller authenticated by client certificate.
    pub device: Option<DeviceIdentity>,
}

/// The caller: the device of a verified client certificate (a bearer token
/// sent beside it is not looked at), else the user of its bearer token. 401
/// for a certificate naming no usable device, and without either.
pub async fn authenticate(
    client: &Client,
    headers: &HeaderMap,
    certificate: &ClientCertificate,
) -> Result<Caller, Problem> {
    match certificate {
        ClientCertificate::Device(device) => Ok(Caller {
            user: device.user_info(),
            device: Some(device.clone()),
        }),
        ClientCertificate::Unusable(why) => Err(Problem::new(
            StatusCode::UNAUTHORIZED,
            format!(
                "{why}; the certificate must name one client id (subject CN, or a Margo SPIFFE ID)"
            ),
        )),
        ClientCertificate::None => Ok(Caller {
            user: token_user(client, headers).await?,
            device: None,
        }),
    }
}

/// The user of the bearer token; 401 without one or with one the API server
/// does not accept.
async fn token_user(client: &Client, headers: &HeaderMap) -> Result<UserInfo, Problem> {
    let token = bearer(headers).ok_or_else(|| {
        Problem::new(
            StatusCode::UNAUTHORIZED,
            "send a Kubernetes bearer token (Authorization: Bearer <token>), e.g. a ServiceAccount's from `kubectl create token`, or (over TLS with a client CA configured) a device's client certificate",
        )
    })?;
    let review = TokenReview {
        spec: TokenReviewSpec {
            token: Some(token.to_owned()),
            audiences: None,
        },
        ..TokenReview::default()
    };
    let reviewed = Api::<TokenReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .map_err(|error| unavailable("checking the bearer token (TokenReview)", error))?;
    let status = reviewed.status.unwrap_or_default();
    match (status.authenticated, status.user) {
        (Some(true), Some(user)) => Ok(user),
        _ => Err(Problem::new(
            StatusCode::UNAUTHORIZED,
            format!(
                "the bearer token is not valid for this cluster{}",
                status
                    .error
                    .map(|why| format!(": {why}"))
                    .unwrap_or_default()
            ),
        )),
    }
}

/// Whether `user` may `verb` the deployment status of DeploymentPlan
/// `namespace/plan`, or, with `plan` `None`, of every plan of `namespace`
/// (with `namespace` `None` too: of every namespace). Only a failure to ask is
/// an error (503); the caller's refusal is worded by the caller of this, the
/// same whether the deployment exists or not.
pub async fn allowed(
    client: &Client,
    user: &UserInfo,
    verb: &str,
    namespace: Option<&str>,
    plan: Option<&str>,
) -> Result<bool, Problem> {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.username.clone(),
            uid: user.uid.clone(),
            groups: user.groups.clone(),
            extra: user.extra.clone(),
            resource_attributes: Some(ResourceAttributes {
                namespace: namespace.map(str::to_owned),
                verb: Some(verb.to_owned()),
                group: Some("shoal.dev".to_owned()),
                resource: Some("deploymentplans".to_owned()),
                subresource: Some(SUBRESOURCE.to_owned()),
                name: plan.map(str::to_owned),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let reviewed = Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .map_err(|error| unavailable("checking permission (SubjectAccessReview)", error))?;
    Ok(reviewed.status.is_some_and(|status| status.allowed))
}

/// The refusal of `user`'s `verb` on deployment `deployment_id`: the same words
/// for a deployment that exists and one that does not, so that a refusal says
/// nothing about which deployments there are.
pub fn refusal(user: &UserInfo, verb: &str, deployment_id: &str) -> Problem {
    Problem::new(
        StatusCode::FORBIDDEN,
        format!(
            "{} may not {verb} deploymentplans/{SUBRESOURCE} for deployment {deployment_id:?}",
            user.username.as_deref().unwrap_or("this caller")
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            value.parse().expect("a header value"),
        );
        headers
    }

    #[test]
    fn only_a_nonempty_bearer_token_is_taken() {
        assert_eq!(bearer(&headers("Bearer abc")), Some("abc"));
        assert_eq!(bearer(&headers("bearer abc")), Some("abc"));
        assert_eq!(bearer(&headers("Basic abc")), None);
        assert_eq!(bearer(&headers("Bearer ")), None);
        assert_eq!(bearer(&HeaderMap::new()), None);
    }

    #[test]
    fn a_refusal_names_the_caller_and_the_deployment_and_no_plan() {
        let user = UserInfo {
            username: Some("system:serviceaccount:ns:stranger".to_owned()),
            ..UserInfo::default()
        };
        let refused = refusal(&user, "get", "some-id");
        assert_eq!(refused.status, StatusCode::FORBIDDEN);
        assert_eq!(
            refused.detail,
            "system:serviceaccount:ns:stranger may not get deploymentplans/deploymentstatus for deployment \"some-id\""
        );
    }
}
