//! TLS with rustls (the `ring` provider), certificates from PEM files: the server side of a
//! listener (ALPN `h2` and `http/1.1`; optionally requiring client certificates from a CA
//! file, mutual TLS) and the client side towards upstreams (roots from a
//! CA file, an optional fixed server name, an optional client certificate for mTLS).
//!
//! Every problem with the files is reported with the config file, the field, the file it
//! names and the fix, at start and on reload (a bad reload keeps the running config).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use crate::config::{TlsConfig, UpstreamTlsConfig};
use crate::ProxyError;

/// The crypto provider every TLS config of the proxy uses.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The upstream side, loaded: the client config and the name to verify the upstream by.
#[derive(Clone, Debug)]
pub struct ClientTls {
    pub config: Arc<ClientConfig>,
    /// Absent: the upstream's IP address (its certificate must name it).
    pub server_name: Option<ServerName<'static>>,
}

/// A path of the config, relative to the config file's directory when it is relative.
pub fn beside(file: &Path, path: &Path) -> PathBuf {
    match file.parent() {
        Some(dir) if path.is_relative() => dir.join(path),
        _ => path.to_path_buf(),
    }
}

fn bad(file: &Path, field: &str, problem: String) -> ProxyError {
    ProxyError::Config { file: file.to_path_buf(), field: field.to_string(), problem }
}

/// What a PEM read failure means for the person fixing it.
fn pem_problem(path: &Path, what: &str, e: pem::Error) -> String {
    match e {
        pem::Error::Io(e) => format!("cannot read {}: {e}", path.display()),
        pem::Error::NoItemsFound => {
            format!(
                "{} holds no {what} (expected a PEM block such as `-----BEGIN {}-----`)",
                path.display(),
                pem_label(what)
            )
        }
        e => format!("{} is not valid PEM ({e}); give a PEM file with the {what}", path.display()),
    }
}

fn pem_label(what: &str) -> &'static str {
    if what.contains("key") {
        "PRIVATE KEY"
    } else {
        "CERTIFICATE"
    }
}

/// The certificates of the PEM file `field` names (at least one).
fn certificates(file: &Path, field: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, ProxyError> {
    let path = beside(file, path);
    let certs = CertificateDer::pem_file_iter(&path)
        .map_err(|e| bad(file, field, pem_problem(&path, "certificate", e)))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(file, field, pem_problem(&path, "certificate", e)))?;
    if certs.is_empty() {
        return Err(bad(file, field, pem_problem(&path, "certificate", pem::Error::NoItemsFound)));
    }
    Ok(certs)
}

/// The private key of the PEM file `field` names (PKCS#8, PKCS#1 or SEC1).
fn private_key(file: &Path, field: &str, path: &Path) -> Result<PrivateKeyDer<'static>, ProxyError> {
    let path = beside(file, path);
    PrivateKeyDer::from_pem_file(&path).map_err(|e| bad(file, field, pem_problem(&path, "private key", e)))
}

/// A rustls refusal of a certificate and key pair, explained.
fn pair_problem(cert: &Path, key: &Path, e: rustls::Error) -> String {
    match e {
        rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch) => format!(
            "the private key in {} does not match the certificate in {} (the first certificate of the chain must be the key's)",
            key.display(),
            cert.display()
        ),
        e => format!("certificate {} and key {} cannot be used: {e}", cert.display(), key.display()),
    }
}

/// The server config of a listener's `[tls]`: its certificate chain and key, ALPN `h2` and
/// `http/1.1` (the connection's protocol is then read from its first bytes, as on h2c).
pub fn server(file: &Path, field: &str, tls: &TlsConfig) -> Result<Arc<ServerConfig>, ProxyError> {
    let certs = certificates(file, &format!("{field}.cert_file"), &tls.cert_file)?;
    let key = private_key(file, &format!("{field}.key_file"), &tls.key_file)?;
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(file, field, format!("{e}")))?;
    let builder = match &tls.client_ca_file {
        None => builder.with_no_client_auth(),
        Some(ca_file) => {
            builder.with_client_cert_verifier(client_verifier(file, &format!("{field}.client_ca_file"), ca_file)?)
        }
    };
    let mut config = builder.with_single_cert(certs, key).map_err(|e| {
        bad(
            file,
            &format!("{field}.key_file"),
            pair_problem(&beside(file, &tls.cert_file), &beside(file, &tls.key_file), e),
        )
    })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The CAs of the PEM file `field` names, each checked to be usable as a trust anchor.
fn roots(file: &Path, field: &str, path: &Path) -> Result<RootCertStore, ProxyError> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(file, field, path)? {
        roots.add(cert).map_err(|e| {
            bad(file, field, format!("{}: not a usable CA certificate: {e}", beside(file, path).display()))
        })?;
    }
    Ok(roots)
}

/// Mutual TLS on a listener: a client must present a certificate chaining to a CA of
/// `ca_file` (WebPKI rules: valid now, usable for client authentication); one that
/// presents none, or another CA's, fails the handshake.
fn client_verifier(
    file: &Path,
    field: &str,
    ca_file: &Path,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, ProxyError> {
    let roots = roots(file, field, ca_file)?;
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider()).build().map_err(|e| {
        bad(file, field, format!("{}: cannot verify clients with it: {e}", beside(file, ca_file).display()))
    })
}

/// The client config of `[upstream_tls]`: the upstream's certificate must chain to a
/// certificate of `ca_file` and name `server_name` (or the upstream's IP address).
pub fn client(file: &Path, field: &str, tls: &UpstreamTlsConfig) -> Result<ClientTls, ProxyError> {
    let roots = roots(file, &format!("{field}.ca_file"), &tls.ca_file)?;
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(file, field, format!("{e}")))?
        .with_root_certificates(roots);
    let config = match (&tls.cert_file, &tls.key_file) {
        (None, None) => builder.with_no_client_auth(),
        (Some(cert_file), Some(key_file)) => {
            let certs = certificates(file, &format!("{field}.cert_file"), cert_file)?;
            let key = private_key(file, &format!("{field}.key_file"), key_file)?;
            builder.with_client_auth_cert(certs, key).map_err(|e| {
                bad(
                    file,
                    &format!("{field}.key_file"),
                    pair_problem(&beside(file, cert_file), &beside(file, key_file), e),
                )
            })?
        }
        (Some(_), None) => {
            return Err(bad(
                file,
                &format!("{field}.key_file"),
                "missing: a client certificate needs its key_file".into(),
            ))
        }
        (None, Some(_)) => {
            return Err(bad(file, &format!("{field}.cert_file"), "missing: a client key needs its cert_file".into()))
        }
    };
    let server_name = match &tls.server_name {
        None => None,
        Some(name) => Some(ServerName::try_from(name.clone()).map_err(|_| {
            bad(file, &format!("{field}.server_name"), format!("`{name}` is not a DNS name or IP address"))
        })?),
    };
    Ok(ClientTls { config: Arc::new(config), server_name })
}

/// A client config that trusts nothing: the plaintext clients' connector, which never
/// uses it (their URIs are `http://`).
pub fn plaintext_only() -> Arc<ClientConfig> {
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("the ring provider supports the default protocol versions")
        .with_root_certificates(RootCertStore::empty())
        .with_no_client_auth();
    Arc::new(config)
}

/// The rustls error somewhere in `e`'s sources (a failed handshake with an upstream).
pub fn find_tls_error(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut source = Some(e);
    while let Some(s) = source {
        if let Some(t) = s.downcast_ref::<rustls::Error>() {
            return Some(t.to_string());
        }
        // io::Error hides a custom inner error from `source()` (and the TLS connector nests
        // io::Errors): walk into it instead.
        let inner = s.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref());
        source = match inner {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => s.source(),
        };
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{parse_str, Edge, EdgeConfig, Sidecar, SidecarConfig};

    struct Dir(PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A directory with `ca.pem`, `cert.pem` (signed by it, for 127.0.0.1), `key.pem`,
    /// and `other.key` (a key of no certificate here).
    fn files(name: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!("tailor-tls-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca.self_signed(&ca_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
            .unwrap()
            .signed_by(&key, &ca, &ca_key)
            .unwrap();
        std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
        std::fs::write(dir.join("cert.pem"), cert.pem()).unwrap();
        std::fs::write(dir.join("key.pem"), key.serialize_pem()).unwrap();
        std::fs::write(dir.join("other.key"), rcgen::KeyPair::generate().unwrap().serialize_pem()).unwrap();
        std::fs::write(dir.join("empty.pem"), "nothing PEM here\n").unwrap();
        Dir(dir)
    }

    fn edge(dir: &Dir, tables: &str) -> Result<Edge, ProxyError> {
        let file = dir.0.join("edge.toml");
        let text =
            format!("listen = \"127.0.0.1:1\"\n[[routes]]\nname = \"all\"\nupstreams = [\"127.0.0.1:2\"]\n{tables}");
        let config: EdgeConfig = parse_str(&file, &text)?;
        Edge::check(&file, config)
    }

    fn error(dir: &Dir, tables: &str) -> String {
        edge(dir, tables).expect_err("the config is refused").to_string()
    }

    #[test]
    fn certificates_from_files_relative_to_the_config() {
        let dir = files("good");
        let loaded = edge(
            &dir,
            "[tls]\ncert_file = \"cert.pem\"\nkey_file = \"key.pem\"\n[upstream_tls]\nca_file = \"ca.pem\"\nserver_name = \"svc.internal\"\ncert_file = \"cert.pem\"\nkey_file = \"key.pem\"\n",
        )
        .unwrap();
        let server = loaded.tls.server.expect("a server config");
        assert_eq!(server.alpn_protocols, vec![b"h2".to_vec(), b"http/1.1".to_vec()]);
        let upstream = loaded.tls.upstream.expect("a client config");
        assert!(upstream.config.client_auth_cert_resolver.has_certs(), "mTLS client certificate loaded");
        assert_eq!(upstream.server_name, Some(ServerName::try_from("svc.internal").unwrap()));
    }

    #[test]
    fn bad_files_are_reported_with_the_field_the_file_and_the_fix() {
        let dir = files("bad");
        let e = error(&dir, "[tls]\ncert_file = \"missing.pem\"\nkey_file = \"key.pem\"\n");
        assert!(e.contains("`tls.cert_file`") && e.contains("missing.pem") && e.contains("cannot read"), "{e}");
        let e = error(&dir, "[tls]\ncert_file = \"empty.pem\"\nkey_file = \"key.pem\"\n");
        assert!(
            e.contains("`tls.cert_file`") && e.contains("holds no certificate") && e.contains("BEGIN CERTIFICATE"),
            "{e}"
        );
        let e = error(&dir, "[tls]\ncert_file = \"cert.pem\"\nkey_file = \"cert.pem\"\n");
        assert!(e.contains("`tls.key_file`") && e.contains("holds no private key"), "{e}");
        let e = error(&dir, "[tls]\ncert_file = \"cert.pem\"\nkey_file = \"other.key\"\n");
        assert!(e.contains("`tls.key_file`") && e.contains("does not match the certificate"), "{e}");
        let e = error(&dir, "[upstream_tls]\nca_file = \"key.pem\"\n");
        assert!(e.contains("`upstream_tls.ca_file`") && e.contains("holds no certificate"), "{e}");
        let e = error(&dir, "[upstream_tls]\nca_file = \"ca.pem\"\ncert_file = \"cert.pem\"\n");
        assert!(e.contains("`upstream_tls.key_file`") && e.contains("needs its key_file"), "{e}");
        let e = error(&dir, "[upstream_tls]\nca_file = \"ca.pem\"\nserver_name = \"not a name\"\n");
        assert!(e.contains("`upstream_tls.server_name`"), "{e}");
        let e = error(&dir, "[tls]\ncert = \"cert.pem\"\n");
        assert!(e.contains("unknown field `cert`"), "{e}");
        let e =
            error(&dir, "[tls]\ncert_file = \"cert.pem\"\nkey_file = \"key.pem\"\nclient_ca_file = \"empty.pem\"\n");
        assert!(
            e.contains("`tls.client_ca_file`") && e.contains("empty.pem") && e.contains("holds no certificate"),
            "{e}"
        );
        let e = error(&dir, "[tls]\ncert_file = \"cert.pem\"\nkey_file = \"key.pem\"\nclient_ca_file = \"gone.pem\"\n");
        assert!(e.contains("`tls.client_ca_file`") && e.contains("gone.pem") && e.contains("cannot read"), "{e}");
    }

    fn sidecar(dir: &Dir, tables: &str) -> Result<Sidecar, ProxyError> {
        let file = dir.0.join("sidecar.toml");
        let text = format!("listen = \"127.0.0.1:1\"\nupstream = \"127.0.0.1:2\"\n{tables}");
        let config: SidecarConfig = parse_str(&file, &text)?;
        Sidecar::check(&file, config)
    }

    #[test]
    fn client_certificates_and_egress_tls_load_per_listener() {
        let dir = files("mtls");
        let loaded =
            edge(&dir, "[tls]\ncert_file = \"cert.pem\"\nkey_file = \"key.pem\"\nclient_ca_file = \"ca.pem\"\n");
        assert!(loaded.is_ok(), "{:?}", loaded.err());
        let egress = "[[egress]]\nlisten = \"127.0.0.1:3\"\nupstream = \"127.0.0.1:4\"\n\
                      [[egress]]\nlisten = \"127.0.0.1:5\"\nupstream = \"127.0.0.1:6\"\n[egress.upstream_tls]\n";
        let loaded =
            sidecar(&dir, &format!("{egress}ca_file = \"ca.pem\"\nserver_name = \"next.internal\"\n")).unwrap();
        assert!(loaded.tls.egress[0].is_none(), "the first egress stays plaintext");
        let next = loaded.tls.egress[1].as_ref().expect("the second egress calls over TLS");
        assert_eq!(next.server_name, Some(ServerName::try_from("next.internal").unwrap()));
        let e = sidecar(&dir, &format!("{egress}ca_file = \"empty.pem\"\n")).expect_err("refused").to_string();
        assert!(e.contains("`egress[1].upstream_tls.ca_file`") && e.contains("holds no certificate"), "{e}");
        let e =
            sidecar(&dir, &format!("{egress}ca_file = \"ca.pem\"\ncert_file = \"cert.pem\"\n")).expect_err("refused");
        assert!(e.to_string().contains("`egress[1].upstream_tls.key_file`"), "{e}");
    }
}
