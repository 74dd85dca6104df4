//! Who a verified client certificate says the caller is (mutual TLS, see
//! [`super::tls`]), in Kubernetes' own x509 convention so that authorization
//! stays one mechanism, RBAC through the SubjectAccessReview:
//!
//! * the **client id** is the Margo WFM client id of the certificate's SPIFFE
//!   ID when it has one (a URI SAN `spiffe://<trust-domain>/margo/wfm/<wfm-id>/client/<client-id>`,
//!   Margo's WFM identity profile), else its subject CN; it must be a valid
//!   client id (see [`super::reports::check_client_id`]);
//! * the **user** the SubjectAccessReview asks about is
//!   `shoal-device:<client-id>` ([`USER_PREFIX`]), so that no certificate can
//!   pose as a cluster user or ServiceAccount (`system:…`);
//! * the **groups** are `shoal:devices` ([`DEVICES_GROUP`]) and
//!   `shoal-device:<O>` for each subject O, prefixed for the same reason (an
//!   `O=system:masters` certificate gets no cluster rights).
//!
//! Such a caller may then report only for itself and the devices behind it
//! (`<client-id>/…`); see [`DeviceIdentity::check_reports_for`].

use std::net::SocketAddr;

use axum::extract::connect_info::Connected;
use axum::http::StatusCode;
use axum::serve::IncomingStream;
use k8s_openapi::api::authentication::v1::UserInfo;
use rustls::pki_types::CertificateDer;
use x509_parser::extensions::GeneralName;

use super::problem::Problem;
use super::reports;

/// The prefix of a device's Kubernetes user name and of its groups from O.
pub const USER_PREFIX: &str = "shoal-device:";

/// The group every device authenticated by certificate is in.
pub const DEVICES_GROUP: &str = "shoal:devices";

/// A device authenticated by its client certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceIdentity {
    /// Its client id (SPIFFE WFM client id, else subject CN).
    pub client_id: String,
    /// Its subject's O values, unprefixed.
    pub organizations: Vec<String>,
    /// Its certificate's public key (SubjectPublicKeyInfo DER), the one a
    /// payload signature from it must be made with.
    pub public_key: Vec<u8>,
}

impl DeviceIdentity {
    /// The Kubernetes user name RBAC sees: `shoal-device:<client-id>`.
    pub fn user_name(&self) -> String {
        format!("{USER_PREFIX}{}", self.client_id)
    }

    /// The user the SubjectAccessReview asks about.
    pub fn user_info(&self) -> UserInfo {
        let groups = std::iter::once(DEVICES_GROUP.to_owned())
            .chain(
                self.organizations
                    .iter()
                    .map(|organization| format!("{USER_PREFIX}{organization}")),
            )
            .collect();
        UserInfo {
            username: Some(self.user_name()),
            groups: Some(groups),
            ..UserInfo::default()
        }
    }

    /// Refuses (403) a report or read for `device_id` unless it is this
    /// device's or a device's behind it.
    pub fn check_reports_for(&self, device_id: &str) -> Result<(), Problem> {
        if reports::is_of_client(device_id, &self.client_id) {
            return Ok(());
        }
        Err(Problem::new(
            StatusCode::FORBIDDEN,
            format!(
                "the client certificate of client {:?} may report only for itself and the devices behind it, not for {device_id:?} (client {:?})",
                self.client_id,
                reports::client_of(device_id)
            ),
        ))
    }
}

/// What a connection's client certificate says of the caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientCertificate {
    /// No certificate (plain HTTP, or TLS without one): a bearer token is needed.
    None,
    /// A verified certificate naming a device.
    Device(DeviceIdentity),
    /// A verified certificate that names no usable device: why.
    Unusable(String),
}

impl ClientCertificate {
    /// The identity of a verified chain's leaf (`None`: no certificate).
    pub fn of_chain(chain: Option<&[CertificateDer<'_>]>) -> ClientCertificate {
        match chain.and_then(<[_]>::first) {
            None => ClientCertificate::None,
            Some(leaf) => match identity_of(leaf) {
                Ok(device) => ClientCertificate::Device(device),
                Err(why) => ClientCertificate::Unusable(why),
            },
        }
    }
}

/// The device `der` (a verified leaf certificate) names, or why it names none.
pub fn identity_of(der: &[u8]) -> Result<DeviceIdentity, String> {
    let (_, certificate) = x509_parser::parse_x509_certificate(der)
        .map_err(|error| format!("the client certificate does not parse: {error}"))?;
    let client_id = match spiffe_client_id(&certificate)? {
        Some(client_id) => client_id,
        None => common_name(&certificate)?,
    };
    reports::check_client_id(&client_id)
        .map_err(|problem| format!("the client certificate: {}", problem.detail))?;
    let organizations = certificate
        .subject()
        .iter_organization()
        .map(|organization| {
            organization
                .as_str()
                .map(str::to_owned)
                .map_err(|_| "the client certificate's subject O is not text".to_owned())
        })
        .collect::<Result<_, _>>()?;
    Ok(DeviceIdentity {
        client_id,
        organizations,
        public_key: certificate.public_key().raw.to_vec(),
    })
}

/// The subject's one CN.
fn common_name(
    certificate: &x509_parser::certificate::X509Certificate<'_>,
) -> Result<String, String> {
    let mut names = certificate.subject().iter_common_name();
    match (names.next(), names.next()) {
        (Some(name), None) => name
            .as_str()
            .map(str::to_owned)
            .map_err(|_| "the client certificate's subject CN is not text".to_owned()),
        (None, _) => Err("the client certificate has no subject CN (nor a Margo SPIFFE ID) to name its client id".to_owned()),
        (Some(_), Some(_)) => Err("the client certificate has more than one subject CN".to_owned()),
    }
}

/// The WFM client id of the certificate's SPIFFE ID, if it has one; an
/// error for a SPIFFE ID of another shape, or more than one URI SAN (an
/// X.509-SVID has exactly one).
fn spiffe_client_id(
    certificate: &x509_parser::certificate::X509Certificate<'_>,
) -> Result<Option<String>, String> {
    let names = certificate
        .subject_alternative_name()
        .map_err(|error| format!("the client certificate's subject alternative names: {error}"))?;
    let uris: Vec<&str> = names
        .iter()
        .flat_map(|names| names.value.general_names.iter())
        .filter_map(|name| match name {
            GeneralName::URI(uri) => Some(*uri),
            _ => None,
        })
        .collect();
    let spiffe: Vec<&str> = uris
        .iter()
        .copied()
        .filter(|uri| uri.starts_with("spiffe://"))
        .collect();
    match (spiffe.as_slice(), uris.len()) {
        ([], _) => Ok(None),
        ([id], 1) => wfm_client_id(id).map(|id| Some(id.to_owned())).ok_or_else(|| {
            format!("the client certificate's SPIFFE ID {id:?} is not a Margo WFM client's (spiffe://<trust-domain>/margo/wfm/<wfm-id>/client/<client-id>)")
        }),
        _ => Err("the client certificate has more than one URI SAN; an X.509-SVID has exactly one".to_owned()),
    }
}

/// `<client-id>` of `spiffe://<trust-domain>/margo/wfm/<wfm-id>/client/<client-id>`.
fn wfm_client_id(id: &str) -> Option<&str> {
    let path = id.strip_prefix("spiffe://")?;
    match path.split('/').collect::<Vec<_>>().as_slice() {
        [domain, "margo", "wfm", wfm, "client", client]
            if !domain.is_empty() && !wfm.is_empty() && !client.is_empty() =>
        {
            Some(client)
        }
        _ => None,
    }
}

/// A connection's peer: its address and what its client certificate says.
#[derive(Clone, Debug)]
pub struct Peer {
    /// The remote address.
    pub address: SocketAddr,
    /// The client certificate's identity.
    pub certificate: ClientCertificate,
}

impl Connected<IncomingStream<'_, tokio::net::TcpListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, tokio::net::TcpListener>) -> Peer {
        Peer {
            address: *stream.remote_addr(),
            certificate: ClientCertificate::None,
        }
    }
}

impl Connected<IncomingStream<'_, super::tls::TlsListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, super::tls::TlsListener>) -> Peer {
        stream.remote_addr().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, DnType, KeyPair, SanType};

    fn certificate(edit: impl FnOnce(&mut CertificateParams)) -> Vec<u8> {
        let key = KeyPair::generate().expect("a key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("parameters");
        params.distinguished_name = rcgen::DistinguishedName::new();
        edit(&mut params);
        params
            .self_signed(&key)
            .expect("a certificate")
            .der()
            .to_vec()
    }

    fn named(cn: &str, organizations: &[&str]) -> Vec<u8> {
        certificate(|params| {
            params.distinguished_name.push(DnType::CommonName, cn);
            for organization in organizations {
                params
                    .distinguished_name
                    .push(DnType::OrganizationName, *organization);
            }
        })
    }

    fn spiffe(uri: &str) -> Vec<u8> {
        certificate(|params| {
            params
                .distinguished_name
                .push(DnType::CommonName, "ignored");
            params.subject_alt_names = vec![SanType::URI(uri.try_into().expect("an IA5 string"))];
        })
    }

    #[test]
    fn the_cn_names_the_client_and_o_its_groups_all_prefixed() {
        // (rcgen writes one O at most.)
        let device = identity_of(&named("edge-1", &["system:masters"])).expect("a device");
        assert_eq!(device.client_id, "edge-1");
        let user = device.user_info();
        assert_eq!(user.username.as_deref(), Some("shoal-device:edge-1"));
        assert_eq!(
            user.groups,
            Some(vec![
                "shoal:devices".to_owned(),
                "shoal-device:system:masters".to_owned()
            ])
        );
    }

    #[test]
    fn a_margo_spiffe_id_names_the_client_before_the_cn() {
        let device = identity_of(&spiffe(
            "spiffe://plant.example/margo/wfm/shoal/client/gw-7",
        ))
        .expect("a device");
        assert_eq!(device.client_id, "gw-7");
        let other = identity_of(&spiffe("spiffe://plant.example/workload/gw-7"))
            .expect_err("no WFM client");
        assert!(other.contains("is not a Margo WFM client's"), "{other}");
    }

    #[test]
    fn a_certificate_naming_no_valid_client_id_is_unusable_not_a_panic() {
        let slash = identity_of(&named("gw/child", &[])).expect_err("a slash");
        assert!(slash.contains("gw/child"), "{slash}");
        let none = identity_of(&certificate(|params| {
            params.distinguished_name = rcgen::DistinguishedName::new();
        }))
        .expect_err("no CN");
        assert!(none.contains("no subject CN"), "{none}");
        let garbage = identity_of(b"not DER").expect_err("garbage");
        assert!(garbage.contains("does not parse"), "{garbage}");
        assert_eq!(ClientCertificate::of_chain(None), ClientCertificate::None);
        let unusable = ClientCertificate::of_chain(Some(&[CertificateDer::from(b"x".to_vec())]));
        assert!(
            matches!(unusable, ClientCertificate::Unusable(_)),
            "{unusable:?}"
        );
    }

    #[test]
    fn a_device_reports_for_itself_and_its_children_only() {
        let gateway = DeviceIdentity {
            client_id: "gw".to_owned(),
            organizations: Vec::new(),
            public_key: Vec::new(),
        };
        assert!(gateway.check_reports_for("gw").is_ok());
        assert!(gateway.check_reports_for("gw/child/grandchild").is_ok());
        let refused = gateway
            .check_reports_for("gw2/child")
            .expect_err("another client");
        assert_eq!(refused.status, StatusCode::FORBIDDEN);
        assert!(
            refused.detail.contains("\"gw\"") && refused.detail.contains("\"gw2\""),
            "{}",
            refused.detail
        );
    }
}
