//! The deployment status endpoint over TLS, through a real TLS client (curl):
//! a device authenticated by its client certificate (mutual TLS) reports for
//! itself and the devices behind it and for nobody else; a certificate from
//! another CA is refused at the handshake; a device without RBAC is refused
//! 403; a bearer token still works over TLS; a renewed certificate is served
//! without a restart, and a broken one leaves the last good one served. The
//! files sit in a directory laid out as kubelet mounts a Secret (`..data`, a
//! symlink swapped at once).

use crate::cluster_status_api::{
    Answer, Endpoint, callers, curl_with, document_in, plan_on_one_member, report_body,
};
use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{Env, eventually};
use serde_json::json;
use shoal_controller::status_api::tls::{TlsFiles, server_config};
use shoal_emulator::pki::{Authority, Issued};

const WAIT: Duration = Duration::from_secs(30);

/// A directory as kubelet mounts a Secret: `tls.crt`, `tls.key`, `ca.crt`
/// link to `..data/…`, and `..data` links to the current version's directory.
struct SecretMount {
    dir: tempfile::TempDir,
    version: u32,
}

impl SecretMount {
    fn new() -> SecretMount {
        let dir = tempfile::tempdir().expect("a directory");
        for name in ["tls.crt", "tls.key", "ca.crt"] {
            std::os::unix::fs::symlink(format!("..data/{name}"), dir.path().join(name))
                .expect("a symlink");
        }
        SecretMount { dir, version: 0 }
    }

    /// Writes a new version of the files and swaps `..data` to it at once.
    fn swap(&mut self, certificate: &str, key: &str, ca: &str) {
        self.version += 1;
        let version = format!("..v{}", self.version);
        let target = self.dir.path().join(&version);
        std::fs::create_dir(&target).expect("a version directory");
        for (name, text) in [("tls.crt", certificate), ("tls.key", key), ("ca.crt", ca)] {
            std::fs::write(target.join(name), text).expect("write");
        }
        let next = self.dir.path().join("..data_tmp");
        std::os::unix::fs::symlink(&version, &next).expect("a symlink");
        std::fs::rename(&next, self.dir.path().join("..data")).expect("the swap");
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn files(&self) -> TlsFiles {
        TlsFiles {
            certificate: self.path("tls.crt"),
            key: self.path("tls.key"),
            client_ca: Some(self.path("ca.crt")),
            reload: Duration::from_millis(100),
        }
    }
}

/// The endpoint over TLS with `files`, as the controller's identity.
async fn start_tls(env: &Env, files: &TlsFiles) -> Endpoint {
    let config = server_config(files).expect("the TLS files load");
    Endpoint::start_as(env, env.controller_clients().api, Some(config)).await
}

/// A client's certificate and key written to files curl reads.
struct ClientFiles {
    certificate: PathBuf,
    key: PathBuf,
}

fn write_client(dir: &Path, name: &str, issued: &Issued) -> ClientFiles {
    let certificate = dir.join(format!("{name}.crt"));
    let key = dir.join(format!("{name}.key"));
    std::fs::write(&certificate, &issued.certificate_pem).expect("write");
    std::fs::write(&key, &issued.key_pem).expect("write");
    ClientFiles { certificate, key }
}

/// curl trusting the CA at `ca`, presenting `client`'s certificate if any.
async fn curl_tls(
    ca: &Path,
    client: Option<&ClientFiles>,
    url: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> Answer {
    let ca = ca.to_string_lossy().into_owned();
    let mut arguments = vec!["--cacert".to_owned(), ca];
    if let Some(client) = client {
        arguments.extend([
            "--cert".to_owned(),
            client.certificate.to_string_lossy().into_owned(),
            "--key".to_owned(),
            client.key.to_string_lossy().into_owned(),
        ]);
    }
    let arguments: Vec<&str> = arguments.iter().map(String::as_str).collect();
    curl_with(&arguments, url, token, body).await
}

/// `X-Payload-Signature: <key>;<signature>` of `body` by the PKCS#8 key `key_der`.
fn signature_header(key_der: &[u8], body: &[u8]) -> String {
    use base64::Engine as _;
    use rcgen::{PublicKeyData as _, SigningKey as _};
    let key = rcgen::KeyPair::try_from(key_der).expect("a key");
    let engine = base64::engine::general_purpose::STANDARD;
    format!(
        "X-Payload-Signature: {};{}",
        engine.encode(key.subject_public_key_info()),
        engine.encode(key.sign(body).expect("signs"))
    )
}

/// curl's arguments trusting `ca`, presenting `client`, sending `header`.
fn signed_args<'a>(ca: &'a Path, client: &'a ClientFiles, header: &'a str) -> Vec<&'a str> {
    let path = |path: &'a Path| path.to_str().expect("a UTF-8 path");
    vec![
        "--cacert",
        path(ca),
        "--cert",
        path(&client.certificate),
        "--key",
        path(&client.key),
        "-H",
        header,
    ]
}

/// RBAC for device `client_id`: the reporter ClusterRole bound to its user.
async fn bind_device(env: &Env, client_id: &str) {
    env.apply(&format!(
        r#"apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: device-{client_id}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: shoal-deployment-status-reporter}}
subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: "shoal-device:{client_id}"}}]
"#
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_reports_by_client_certificate_for_itself_and_its_children_only() {
    let env = Env::start().await;
    env.install_plan_crd().await;
    let controller = env.start_controller();
    plan_on_one_member(&env).await;
    let (_, reporter, _) = callers(&env).await;
    bind_device(&env, "gw").await;
    let id = document_in(&env, "pending").await.deployment_id;

    let ca = Authority::new("devices").expect("a CA");
    let serving = ca.serving("shoal-status").expect("a serving certificate");
    let mut mount = SecretMount::new();
    mount.swap(
        &serving.certificate_pem,
        &serving.key_pem,
        &ca.certificate_pem(),
    );
    let endpoint = start_tls(&env, &mount.files()).await;
    let clients = tempfile::tempdir().expect("a directory");
    let gateway_certificate = ca.client("gw", &["plant-a"]).expect("a certificate");
    let gateway = write_client(clients.path(), "gw", &gateway_certificate);
    let lonely = write_client(
        clients.path(),
        "lonely",
        &ca.client("lonely", &[]).expect("a certificate"),
    );
    let other_ca = Authority::new("elsewhere").expect("a CA");
    let impostor = write_client(
        clients.path(),
        "impostor",
        &other_ca.client("gw", &[]).expect("a certificate"),
    );
    let ca_file = mount.path("ca.crt");
    let client_url = |client: &str| {
        format!(
            "{}/api/v1/clients/{client}/deployments/{id}/status",
            endpoint.base
        )
    };
    let installed = json!({"state": "installed"});
    let body = report_body(&id, installed.clone(), installed.clone());

    // The gateway reports for itself by its certificate alone: no token.
    let own = curl_tls(
        &ca_file,
        Some(&gateway),
        &client_url("gw"),
        None,
        Some(&body),
    )
    .await;
    assert_eq!(own.code, 201, "{own:?}");
    assert_eq!(own.json()["deviceId"], "gw");
    // Margo 1.0.0's payload signature, with the certificate's key: checked
    // when sent; a body that is not the one signed is refused.
    let signed = signature_header(&gateway_certificate.key_der, body.as_bytes());
    let arguments = signed_args(&ca_file, &gateway, &signed);
    let answer = curl_with(&arguments, &client_url("gw"), None, Some(&body)).await;
    assert_eq!(answer.code, 200, "{answer:?}");
    let changed = body.replacen("installed", "installing", 1);
    assert_ne!(changed, body);
    curl_with(&arguments, &client_url("gw"), None, Some(&changed))
        .await
        .assert_problem(401, "does not verify");
    // …and for a device behind it, on rc.3's route (deviceId's first id).
    let child = json!({"deploymentId": id, "deviceId": "gw/child", "adoptedManifestVersion": 1,
        "status": {"state": "installing"},
        "components": [{"name": "nginx", "state": "installing"}, {"name": "exporter", "state": "pending"}]})
    .to_string();
    let rc3_url = format!("{}/api/v1/deployments/{id}/status", endpoint.base);
    let kept = curl_tls(&ca_file, Some(&gateway), &rc3_url, None, Some(&child)).await;
    assert_eq!(kept.code, 201, "{kept:?}");
    let read = curl_tls(
        &ca_file,
        Some(&gateway),
        &format!("{}?deviceId=gw/child", client_url("gw")),
        None,
        None,
    )
    .await;
    assert_eq!(read.json()["status"]["state"], "installing", "{read:?}");

    // Not for another client, by either route, nor reading another's report.
    curl_tls(
        &ca_file,
        Some(&gateway),
        &client_url("edge-9"),
        None,
        Some(&body),
    )
    .await
    .assert_problem(403, "client \"gw\" may report only for itself");
    let foreign = child.replace("gw/child", "edge-9/child");
    let refused = curl_tls(&ca_file, Some(&gateway), &rc3_url, None, Some(&foreign)).await;
    refused.assert_problem(403, "not for \"edge-9/child\" (client \"edge-9\")");
    curl_tls(&ca_file, Some(&gateway), &client_url("edge-9"), None, None)
        .await
        .assert_problem(403, "may report only for itself");

    // A device the CA signed but RBAC does not allow: 403 naming its user.
    curl_tls(
        &ca_file,
        Some(&lonely),
        &client_url("lonely"),
        None,
        Some(&body),
    )
    .await
    .assert_problem(403, "shoal-device:lonely may not update");
    // A certificate from another CA: no TLS session at all.
    let handshake = curl_tls(
        &ca_file,
        Some(&impostor),
        &client_url("gw"),
        None,
        Some(&body),
    )
    .await;
    assert_eq!(handshake.code, 0, "{handshake:?}");
    assert!(handshake.stderr.contains("curl: ("), "{handshake:?}");
    // In-cluster callers keep their bearer token over TLS; nobody gets in with neither.
    let by_token = curl_tls(
        &ca_file,
        None,
        &client_url("edge-1"),
        Some(&reporter),
        Some(&body),
    )
    .await;
    assert_eq!(by_token.code, 201, "{by_token:?}");
    curl_tls(&ca_file, None, &client_url("edge-1"), None, None)
        .await
        .assert_problem(401, "client certificate");

    endpoint.stop().await;
    controller.stop().await;
    env.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_certificate_is_served_without_a_restart_and_a_broken_one_is_not() {
    let env = Env::start().await;
    let first_ca = Authority::new("first").expect("a CA");
    let second_ca = Authority::new("second").expect("a CA");
    let first = first_ca.serving("shoal-status").expect("a certificate");
    let second = second_ca.serving("shoal-status").expect("a certificate");
    let mut mount = SecretMount::new();
    let bundle = first_ca.certificate_pem();
    mount.swap(&first.certificate_pem, &first.key_pem, &bundle);
    let endpoint = start_tls(&env, &mount.files()).await;
    let trusted = tempfile::tempdir().expect("a directory");
    let trust = |name: &str, authority: &Authority| {
        let path = trusted.path().join(name);
        std::fs::write(&path, authority.certificate_pem()).expect("write");
        path
    };
    let (trust_first, trust_second) = (
        trust("first.crt", &first_ca),
        trust("second.crt", &second_ca),
    );
    let schema = format!("{}/api/v1/schemas/deployment-status", endpoint.base);
    let answer = curl_tls(&trust_first, None, &schema, None, None).await;
    assert_eq!(answer.code, 200, "{answer:?}");

    mount.swap(&second.certificate_pem, &second.key_pem, &bundle);
    eventually(
        "a new handshake meets the renewed certificate",
        WAIT,
        || async {
            let answer = curl_tls(&trust_second, None, &schema, None, None).await;
            (answer.code == 200).then_some(())
        },
    )
    .await;
    let old = curl_tls(&trust_first, None, &schema, None, None).await;
    assert_eq!(old.code, 0, "{old:?}");

    // A key that is not the certificate's, then a truncated certificate: the
    // endpoint keeps serving the last good one.
    let third = first_ca.serving("shoal-status").expect("a certificate");
    mount.swap(&third.certificate_pem, &first.key_pem, &bundle);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let kept = curl_tls(&trust_second, None, &schema, None, None).await;
    assert_eq!(kept.code, 200, "{kept:?}");
    mount.swap(&third.certificate_pem[..60], &third.key_pem, &bundle);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let kept = curl_tls(&trust_second, None, &schema, None, None).await;
    assert_eq!(kept.code, 200, "{kept:?}");

    endpoint.stop().await;
    env.finish().await;
}
