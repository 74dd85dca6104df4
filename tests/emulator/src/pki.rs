//! Certificates for tests and the sandbox: a certificate authority that
//! issues serving certificates (for `127.0.0.1` and `localhost`) and client
//! certificates (a subject CN and O, as Kubernetes and Shoal's status
//! endpoint read them), each as PEM ready to write to files.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair,
};

/// A certificate and its private key.
pub struct Issued {
    /// The certificate (PEM).
    pub certificate_pem: String,
    /// Its private key (PEM, PKCS#8).
    pub key_pem: String,
    /// The certificate (DER).
    pub certificate_der: Vec<u8>,
    /// Its private key (DER, PKCS#8).
    pub key_der: Vec<u8>,
}

/// A self-signed CA.
pub struct Authority {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

fn failed(what: &str, error: impl std::fmt::Display) -> String {
    format!("{what}: {error}")
}

impl Authority {
    /// A new CA named `name` (its subject CN).
    pub fn new(name: &str) -> Result<Authority, String> {
        let key = KeyPair::generate().map_err(|error| failed("generating the CA key", error))?;
        let mut params = CertificateParams::new(Vec::<String>::new())
            .map_err(|error| failed("CA parameters", error))?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let issuer = CertifiedIssuer::self_signed(params, key)
            .map_err(|error| failed("signing the CA", error))?;
        Ok(Authority { issuer })
    }

    /// The CA certificate (PEM), for a client's `--cacert` or a server's client CA bundle.
    pub fn certificate_pem(&self) -> String {
        self.issuer.pem()
    }

    /// The CA certificate (DER).
    pub fn certificate_der(&self) -> Vec<u8> {
        self.issuer.der().to_vec()
    }

    /// A serving certificate for `127.0.0.1` and `localhost`, CN `name`.
    pub fn serving(&self, name: &str) -> Result<Issued, String> {
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
                .map_err(|error| failed("serving certificate parameters", error))?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.issue(params)
    }

    /// A client certificate with subject CN `common_name` and an O for each of
    /// `organizations`.
    pub fn client(&self, common_name: &str, organizations: &[&str]) -> Result<Issued, String> {
        let mut params = CertificateParams::new(Vec::<String>::new())
            .map_err(|error| failed("client certificate parameters", error))?;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        for organization in organizations {
            params
                .distinguished_name
                .push(DnType::OrganizationName, *organization);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.issue(params)
    }

    fn issue(&self, params: CertificateParams) -> Result<Issued, String> {
        let key = KeyPair::generate().map_err(|error| failed("generating a key", error))?;
        let certificate = params
            .signed_by(&key, &self.issuer)
            .map_err(|error| failed("signing a certificate", error))?;
        Ok(Issued {
            certificate_pem: certificate.pem(),
            key_pem: key.serialize_pem(),
            certificate_der: certificate.der().to_vec(),
            key_der: key.serialize_der(),
        })
    }
}
