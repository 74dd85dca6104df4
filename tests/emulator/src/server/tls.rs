//! HTTPS, as a real API server speaks it: a CA and a serving certificate for
//! `127.0.0.1` and `localhost`, made fresh for each server. It matters beyond
//! looks: kubectl sends a bearer token only over TLS, so without it every
//! kubectl request would be anonymous.

use std::net::SocketAddr;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use crate::pki::Authority;

/// How long a client may take to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A server's certificate chain and the CA a client trusts it with.
pub struct Certificates {
    /// The CA certificate (PEM), for the kubeconfig's `certificate-authority-data`.
    pub ca_pem: String,
    /// The rustls configuration serving the certificate.
    pub config: Arc<rustls::ServerConfig>,
}

/// A new CA and a serving certificate signed by it.
pub fn certificates() -> Result<Certificates, String> {
    let ca = Authority::new("shoal-emulator-ca")?;
    let serving = ca.serving("shoal-emulator")?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|error| format!("TLS versions: {error}"))?
        .with_no_client_auth()
        .with_single_cert(
            vec![
                CertificateDer::from(serving.certificate_der),
                CertificateDer::from(ca.certificate_der()),
            ],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(serving.key_der)),
        )
        .map_err(|error| format!("the serving certificate: {error}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Certificates {
        ca_pem: ca.certificate_pem(),
        config: Arc::new(config),
    })
}

/// TCP connections that finished their TLS handshake, for `axum::serve`. Handshakes run
/// concurrently, so a slow client does not hold up the others.
pub struct TlsListener {
    established: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
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
                let (stream, peer) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        tracing::debug!(%error, "accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let acceptor = acceptor.clone();
                let sender = sender.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let _ = sender.send((tls, peer)).await;
                        }
                        Ok(Err(error)) => tracing::debug!(%error, %peer, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
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
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.established.recv().await {
            Some(established) => established,
            // The accepting task only ends when the listener is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}
