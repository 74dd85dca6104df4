//! Margo 1.0.0's payload signature: a client may sign a report's body and
//! send `X-Payload-Signature: <public key>;<signature>`, each part base64
//! (standard alphabet): the signer's public key as a DER
//! SubjectPublicKeyInfo, and its signature of the body with SHA-256 (ECDSA
//! P-256/P-384 in ASN.1 form, Ed25519, RSA PKCS#1 v1.5 or PSS).
//!
//! The signature is never required: bearer-token callers and devices may
//! leave it out. When it is sent it must verify (401 otherwise), and from a
//! device authenticated by certificate the key must be that certificate's,
//! so that a signature proves what the certificate proves. A header that is
//! not of that form is 400.

use axum::http::{HeaderMap, StatusCode};
use base64::Engine as _;
use x509_parser::prelude::FromDer as _;
use x509_parser::x509::SubjectPublicKeyInfo;

use super::identity::DeviceIdentity;
use super::problem::Problem;

/// The header's name.
pub const HEADER: &str = "x-payload-signature";

/// Checks the payload signature of `headers`, if any, against `body`; from a
/// device, its key must be the certificate's (`device.public_key`).
pub fn check(
    headers: &HeaderMap,
    body: &[u8],
    device: Option<&DeviceIdentity>,
) -> Result<(), Problem> {
    let Some(value) = headers.get(HEADER) else {
        return Ok(());
    };
    let (key, signature) = parse(value.as_bytes()).map_err(|why| {
        Problem::new(
            StatusCode::BAD_REQUEST,
            format!("X-Payload-Signature {why}; send <base64 public key (SubjectPublicKeyInfo DER)>;<base64 signature>"),
        )
    })?;
    if let Some(device) = device
        && device.public_key != key
    {
        return Err(Problem::new(
            StatusCode::UNAUTHORIZED,
            format!(
                "X-Payload-Signature: the key is not the one of client {:?}'s certificate",
                device.client_id
            ),
        ));
    }
    verify(&key, body, &signature).map_err(|why| {
        Problem::new(
            StatusCode::UNAUTHORIZED,
            format!("X-Payload-Signature: {why}"),
        )
    })
}

/// The key and signature of a header value.
fn parse(value: &[u8]) -> Result<(Vec<u8>, Vec<u8>), String> {
    let text = std::str::from_utf8(value).map_err(|_| "is not text".to_owned())?;
    let (key, signature) = text
        .split_once(';')
        .ok_or_else(|| "has no ';' between key and signature".to_owned())?;
    let decode = |part: &str, what: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(part.trim())
            .map_err(|error| format!("{what} is not base64: {error}"))
    };
    Ok((
        decode(key, "the public key")?,
        decode(signature, "the signature")?,
    ))
}

/// Verifies `signature` of `body` by the SubjectPublicKeyInfo `key`, with
/// any algorithm rustls verifies certificates with.
fn verify(key: &[u8], body: &[u8], signature: &[u8]) -> Result<(), String> {
    let (_, info) = SubjectPublicKeyInfo::from_der(key)
        .map_err(|error| format!("the public key is no SubjectPublicKeyInfo: {error}"))?;
    let raw = &info.subject_public_key.data;
    let algorithms = rustls::crypto::ring::default_provider()
        .signature_verification_algorithms
        .all;
    if algorithms
        .iter()
        .any(|algorithm| algorithm.verify_signature(raw, body, signature).is_ok())
    {
        Ok(())
    } else {
        Err("the signature does not verify against the body with its key".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{KeyPair, PublicKeyData, SigningKey};

    fn header(key: &[u8], signature: &[u8]) -> HeaderMap {
        let engine = base64::engine::general_purpose::STANDARD;
        let value = format!("{};{}", engine.encode(key), engine.encode(signature));
        let mut headers = HeaderMap::new();
        headers.insert(HEADER, value.parse().expect("a header value"));
        headers
    }

    fn device(key: &KeyPair) -> DeviceIdentity {
        DeviceIdentity {
            client_id: "edge-1".to_owned(),
            organizations: Vec::new(),
            public_key: key.subject_public_key_info(),
        }
    }

    #[test]
    fn a_signed_body_passes_and_a_changed_one_or_another_key_does_not() {
        let key = KeyPair::generate().expect("a key");
        let body = br#"{"deploymentId":"d"}"#;
        let signed = header(
            &key.subject_public_key_info(),
            &key.sign(body).expect("signs"),
        );
        assert!(check(&signed, body, None).is_ok());
        assert!(check(&signed, body, Some(&device(&key))).is_ok());
        assert!(
            check(&HeaderMap::new(), body, None).is_ok(),
            "never required"
        );

        let tampered = check(&signed, br#"{"deploymentId":"e"}"#, None).expect_err("tampered");
        assert_eq!(tampered.status, StatusCode::UNAUTHORIZED);
        assert!(
            tampered.detail.contains("does not verify"),
            "{}",
            tampered.detail
        );
        let other = KeyPair::generate().expect("a key");
        let foreign = check(&signed, body, Some(&device(&other))).expect_err("another key");
        assert!(
            foreign.detail.contains("not the one of client \"edge-1\""),
            "{}",
            foreign.detail
        );
    }

    #[test]
    fn a_malformed_header_is_a_400_naming_the_part() {
        let mut headers = HeaderMap::new();
        headers.insert(HEADER, "no-separator".parse().expect("a value"));
        let refused = check(&headers, b"{}", None).expect_err("malformed");
        assert_eq!(refused.status, StatusCode::BAD_REQUEST);
        assert!(refused.detail.contains("no ';'"), "{}", refused.detail);
        headers.insert(HEADER, "!!;AAAA".parse().expect("a value"));
        let refused = check(&headers, b"{}", None).expect_err("not base64");
        assert!(
            refused.detail.contains("public key is not base64"),
            "{}",
            refused.detail
        );
        let garbage = header(b"not DER", b"sig");
        let refused = check(&garbage, b"{}", None).expect_err("not a key");
        assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
        assert!(
            refused.detail.contains("no SubjectPublicKeyInfo"),
            "{}",
            refused.detail
        );
    }
}
