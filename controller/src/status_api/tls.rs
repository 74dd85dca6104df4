//! TLS on the deployment status endpoint: the serving certificate and key
//! (the `tls.crt` and `tls.key` a mounted `kubernetes.io/tls` Secret gives),
//! and optionally a client CA bundle whose certificates authenticate devices
//! (see [`super::identity`]).
//!
//! Every file is read again when a handshake finds the last read older than
//! [`TlsFiles::reload`] (default [`RELOAD_INTERVAL`]), and taken when its bytes
//! changed: kubelet swaps a mounted Secret's files at once (a symlink), so a
//! renewed certificate (cert-manager's, or `kubectl create secret tls`) is
//! served without a restart. New files that do not parse (a key that does not
//! match the certificate, a truncated PEM) are logged as an error, once per
//! content, and the last good certificate is kept. Only at startup does a bad
//! file stop the endpoint: there is no last good one yet.
//!
//! A client without a certificate is let through the handshake (bearer tokens
//! stay for in-cluster callers); one with a certificate the CA bundle did not
//! sign is refused there. The handshake carries no list of acceptable CAs
//! (`certificate_authorities`), so that the bundle can change without one;
//! clients send their certificate anyway.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use super::identity::{ClientCertificate, Peer};

/// How often, at most, the files are read again (on a handshake).
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(5);

/// How long a client may take to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The files the endpoint serves TLS with.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// The serving certificate chain (PEM; the Secret's `tls.crt`).
    pub certificate: PathBuf,
    /// Its private key (PEM: PKCS#8, PKCS#1 or SEC1; the Secret's `tls.key`).
    pub key: PathBuf,
    /// CA certificates (PEM) that sign devices' client certificates; `None`:
    /// no client certificates are asked for.
    pub client_ca: Option<PathBuf>,
    /// How often, at most, the files are read again.
    pub reload: Duration,
}

/// A TLS file that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The file could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not the PEM it should be, or holds none of what it should.
    #[error("{path}: {detail}")]
    Content {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        detail: String,
    },
    /// rustls refused the configuration.
    #[error("the TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

fn content(path: &Path, detail: impl std::fmt::Display) -> TlsError {
    TlsError::Content {
        path: path.to_owned(),
        detail: detail.to_string(),
    }
}

/// The rustls configuration of `files`, the certificate and CA bundle reloaded
/// as they change; an error when a file cannot be used now.
pub fn server_config(files: &TlsFiles) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?;
    let builder = match &files.client_ca {
        Some(bundle) => builder.with_client_cert_verifier(Arc::new(ReloadingClientCa::new(
            bundle,
            provider.clone(),
            files.reload,
        )?)),
        None => builder.with_no_client_auth(),
    };
    let resolver = ReloadingCertificate::new(files, provider)?;
    let mut config = builder.with_cert_resolver(Arc::new(resolver));
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

type Load<T> = Box<dyn Fn(&[Vec<u8>]) -> Result<T, TlsError> + Send + Sync>;

/// A value made from files, made again when their bytes change (checked at
/// most every `interval`); the last good value when the new bytes do not load.
struct Watched<T> {
    paths: Vec<PathBuf>,
    load: Load<T>,
    interval: Duration,
    state: Mutex<WatchState<T>>,
}

struct WatchState<T> {
    current: Arc<T>,
    /// The bytes last read, whether they loaded or not (so a bad file is
    /// reported once, not at every check).
    seen: Vec<Vec<u8>>,
    checked: Instant,
    /// The last read error reported (reported again only when it changes).
    read_error: Option<String>,
}

impl<T> std::fmt::Debug for Watched<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watched")
            .field("paths", &self.paths)
            .finish_non_exhaustive()
    }
}

fn read_all(paths: &[PathBuf]) -> Result<Vec<Vec<u8>>, TlsError> {
    paths
        .iter()
        .map(|path| {
            std::fs::read(path).map_err(|source| TlsError::Read {
                path: path.clone(),
                source,
            })
        })
        .collect()
}

impl<T> Watched<T> {
    /// Reads and loads the files now; an error when they cannot be.
    fn new(paths: Vec<PathBuf>, interval: Duration, load: Load<T>) -> Result<Self, TlsError> {
        let seen = read_all(&paths)?;
        let current = Arc::new(load(&seen)?);
        Ok(Watched {
            paths,
            load,
            interval,
            state: Mutex::new(WatchState {
                current,
                seen,
                checked: Instant::now(),
                read_error: None,
            }),
        })
    }

    /// The value, made again first if the files changed since the last check.
    fn current(&self) -> Arc<T> {
        // A panic elsewhere while holding the lock leaves consistent state:
        // every field is replaced whole.
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if state.checked.elapsed() >= self.interval {
            state.checked = Instant::now();
            self.check(&mut state);
        }
        state.current.clone()
    }

    fn check(&self, state: &mut WatchState<T>) {
        let read = match read_all(&self.paths) {
            Ok(read) => read,
            Err(error) => {
                let error = error.to_string();
                if state.read_error.as_ref() != Some(&error) {
                    tracing::error!(%error, "status endpoint TLS: cannot read the files again; still serving the last good ones");
                    state.read_error = Some(error);
                }
                return;
            }
        };
        state.read_error = None;
        if read == state.seen {
            return;
        }
        match (self.load)(&read) {
            Ok(value) => {
                tracing::info!(files = ?self.paths, "status endpoint TLS: the files changed; serving the new ones");
                state.current = Arc::new(value);
            }
            Err(error) => tracing::error!(
                %error,
                "status endpoint TLS: the files changed but cannot be used; still serving the last good ones"
            ),
        }
        state.seen = read;
    }
}

/// The serving certificate, reloaded as its files change.
#[derive(Debug)]
pub struct ReloadingCertificate(Watched<CertifiedKey>);

impl ReloadingCertificate {
    /// Loads `files`' certificate and key now.
    pub fn new(files: &TlsFiles, provider: Arc<CryptoProvider>) -> Result<Self, TlsError> {
        let paths = vec![files.certificate.clone(), files.key.clone()];
        let named = paths.clone();
        let load: Load<CertifiedKey> = Box::new(move |read| {
            certified_key(&named[0], &read[0], &named[1], &read[1], &provider)
        });
        Ok(ReloadingCertificate(Watched::new(
            paths,
            files.reload,
            load,
        )?))
    }

    /// The certificate served now (its chain's leaf first).
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.0.current()
    }
}

impl ResolvesServerCert for ReloadingCertificate {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// The certificates of PEM `text` read from `path`; an error when it holds none.
fn certificates(path: &Path, text: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let chain = CertificateDer::pem_slice_iter(text)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| content(path, format!("not PEM certificates: {error}")))?;
    if chain.is_empty() {
        return Err(content(path, "holds no PEM certificate"));
    }
    Ok(chain)
}

/// The certificate chain of `certificate` with the private key of `key`,
/// checked to belong together.
fn certified_key(
    certificate_path: &Path,
    certificate: &[u8],
    key_path: &Path,
    key: &[u8],
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let chain = certificates(certificate_path, certificate)?;
    let key = PrivateKeyDer::from_pem_slice(key)
        .map_err(|error| content(key_path, format!("no usable PEM private key: {error}")))?;
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|error| content(key_path, format!("the private key is not usable: {error}")))?;
    let certified = CertifiedKey::new(chain, signing);
    certified.keys_match().map_err(|error| {
        content(
            key_path,
            format!(
                "the private key is not the one of {}: {error}",
                certificate_path.display()
            ),
        )
    })?;
    Ok(certified)
}

/// The client certificate verifier of a CA bundle, reloaded as it changes.
/// Clients without a certificate pass (they authenticate by bearer token).
#[derive(Debug)]
pub struct ReloadingClientCa(Watched<Arc<dyn ClientCertVerifier>>);

impl ReloadingClientCa {
    /// Loads the CA bundle at `path` now.
    pub fn new(
        path: &Path,
        provider: Arc<CryptoProvider>,
        interval: Duration,
    ) -> Result<Self, TlsError> {
        let named = path.to_owned();
        let load: Load<Arc<dyn ClientCertVerifier>> =
            Box::new(move |read| client_verifier(&named, &read[0], &provider));
        Ok(ReloadingClientCa(Watched::new(
            vec![path.to_owned()],
            interval,
            load,
        )?))
    }
}

/// A verifier of client certificates signed by the CAs of PEM `bundle`.
fn client_verifier(
    path: &Path,
    bundle: &[u8],
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let mut roots = RootCertStore::empty();
    for certificate in certificates(path, bundle)? {
        roots
            .add(certificate)
            .map_err(|error| content(path, format!("not a usable CA certificate: {error}")))?;
    }
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()
        .map_err(|error| content(path, format!("not a usable CA bundle: {error}")))
}

impl ClientCertVerifier for ReloadingClientCa {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.0
            .current()
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.current().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.current().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.current().supported_verify_schemes()
    }
}

/// TCP connections that finished their TLS handshake, for `axum::serve`, each
/// with the client certificate's identity. Handshakes run concurrently, so a
/// slow client does not hold up the others.
pub struct TlsListener {
    established: mpsc::Receiver<(TlsStream<TcpStream>, Peer)>,
    local: SocketAddr,
    accepting: tokio::task::JoinHandle<()>,
}

impl TlsListener {
    /// Accepts on `listener`, completing each handshake with `config`.
    pub fn new(
        listener: TcpListener,
        config: Arc<rustls::ServerConfig>,
    ) -> std::io::Result<TlsListener> {
        let local = listener.local_addr()?;
        let acceptor = TlsAcceptor::from(config);
        let (sender, established) = mpsc::channel(64);
        let accepting = tokio::spawn(async move {
            loop {
                let (stream, address) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        tracing::debug!(%error, "status endpoint: accept failed");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let acceptor = acceptor.clone();
                let sender = sender.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let certificate =
                                ClientCertificate::of_chain(tls.get_ref().1.peer_certificates());
                            let _ = sender
                                .send((
                                    tls,
                                    Peer {
                                        address,
                                        certificate,
                                    },
                                ))
                                .await;
                        }
                        Ok(Err(error)) => {
                            tracing::info!(%error, %address, "status endpoint: TLS handshake refused");
                        }
                        Err(_) => {
                            tracing::info!(%address, "status endpoint: TLS handshake timed out")
                        }
                    }
                });
            }
        });
        Ok(TlsListener {
            established,
            local,
            accepting,
        })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = Peer;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.established.recv().await {
            Some(established) => established,
            // The accepting task only ends when the listener is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(Peer {
            address: self.local,
            certificate: ClientCertificate::None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::{CertificateParams, KeyPair};

    /// A self-signed certificate for `name` and its key, as PEM.
    fn self_signed(name: &str) -> (String, String) {
        let key = KeyPair::generate().expect("a key");
        let params = CertificateParams::new(vec![name.to_owned()]).expect("parameters");
        let certificate = params.self_signed(&key).expect("a certificate");
        (certificate.pem(), key.serialize_pem())
    }

    fn write(dir: &Path, (certificate, key): &(String, String)) -> TlsFiles {
        std::fs::write(dir.join("tls.crt"), certificate).expect("write");
        std::fs::write(dir.join("tls.key"), key).expect("write");
        TlsFiles {
            certificate: dir.join("tls.crt"),
            key: dir.join("tls.key"),
            client_ca: None,
            reload: Duration::ZERO,
        }
    }

    fn provider() -> Arc<CryptoProvider> {
        Arc::new(rustls::crypto::ring::default_provider())
    }

    fn served(resolver: &ReloadingCertificate) -> Vec<u8> {
        resolver.current().cert[0].to_vec()
    }

    fn der(pem: &str) -> Vec<u8> {
        CertificateDer::from_pem_slice(pem.as_bytes())
            .expect("PEM")
            .to_vec()
    }

    #[test]
    fn new_files_are_served_once_they_change_and_bad_ones_keep_the_last_good() {
        let dir = tempfile::tempdir().expect("a directory");
        let first = self_signed("first.example");
        let files = write(dir.path(), &first);
        let resolver = ReloadingCertificate::new(&files, provider()).expect("loads");
        assert_eq!(served(&resolver), der(&first.0));

        let second = self_signed("second.example");
        write(dir.path(), &second);
        assert_eq!(served(&resolver), der(&second.0));

        // A key that is not the certificate's, then a truncated certificate.
        let third = self_signed("third.example");
        write(dir.path(), &(third.0.clone(), first.1.clone()));
        assert_eq!(served(&resolver), der(&second.0));
        write(dir.path(), &(third.0[..40].to_owned(), third.1.clone()));
        assert_eq!(served(&resolver), der(&second.0));
        std::fs::remove_file(dir.path().join("tls.key")).expect("remove");
        assert_eq!(served(&resolver), der(&second.0));
        write(dir.path(), &third);
        assert_eq!(served(&resolver), der(&third.0));
    }

    #[test]
    fn the_files_are_read_again_at_most_once_per_interval() {
        let dir = tempfile::tempdir().expect("a directory");
        let first = self_signed("first.example");
        let files = TlsFiles {
            reload: Duration::from_secs(3600),
            ..write(dir.path(), &first)
        };
        let resolver = ReloadingCertificate::new(&files, provider()).expect("loads");
        write(dir.path(), &self_signed("second.example"));
        assert_eq!(served(&resolver), der(&first.0));
    }

    #[test]
    fn unusable_files_at_startup_are_an_error_naming_the_file() {
        let dir = tempfile::tempdir().expect("a directory");
        let (certificate, _) = self_signed("a.example");
        let (_, other_key) = self_signed("b.example");
        let files = write(dir.path(), &(certificate.clone(), other_key));
        let error = ReloadingCertificate::new(&files, provider()).expect_err("keys differ");
        assert!(
            error
                .to_string()
                .contains("tls.key: the private key is not the one of"),
            "{error}"
        );
        let files = write(dir.path(), &("not PEM".to_owned(), String::new()));
        let error = ReloadingCertificate::new(&files, provider()).expect_err("no certificate");
        assert!(
            error
                .to_string()
                .contains("tls.crt: holds no PEM certificate"),
            "{error}"
        );
        let missing = TlsFiles {
            client_ca: Some(dir.path().join("absent.crt")),
            ..write(dir.path(), &self_signed("c.example"))
        };
        let error = server_config(&missing).expect_err("no CA bundle");
        assert!(error.to_string().contains("absent.crt"), "{error}");
        let garbage = dir.path().join("ca.crt");
        std::fs::write(
            &garbage,
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )
        .expect("write");
        let bad_ca = TlsFiles {
            client_ca: Some(garbage),
            ..write(dir.path(), &self_signed("c.example"))
        };
        let error = server_config(&bad_ca).expect_err("an unusable CA");
        assert!(error.to_string().contains("ca.crt"), "{error}");
    }
}
