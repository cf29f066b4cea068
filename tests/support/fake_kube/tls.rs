//! The fake API server's certificates, made with rcgen as kind's kubeadm makes a cluster's: a
//! CA, a server certificate for 127.0.0.1 and a client certificate it signs; plus the broken
//! ones a test needs (an expired server certificate, one for another name, a client certificate
//! of an unknown CA, a CA the server does not use). The server requires a client certificate of
//! its CA, as an API server with `--client-ca-file` does for a kubeconfig's client identity.

use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// Which certificate the server presents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ServerCert {
    /// Signed by the cluster CA, for 127.0.0.1.
    #[default]
    Valid,
    /// Signed by the cluster CA, for 127.0.0.1, expired in 2020.
    Expired,
    /// Signed by the cluster CA, for `kubernetes.invalid` only.
    WrongName,
}

/// Which CA a kubeconfig trusts for the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Trust {
    /// The cluster CA, which signed the server's certificate.
    #[default]
    ClusterCa,
    /// A CA that signed nothing the server presents.
    OtherCa,
}

/// Which client certificate a kubeconfig presents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientCert {
    /// Signed by the cluster CA: the server accepts it.
    #[default]
    Valid,
    /// Signed by a CA the server does not know: the server refuses it.
    UnknownCa,
}

/// What a kubeconfig written for the fake server carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Access {
    pub trust: Trust,
    pub client: ClientCert,
}

/// A certificate and its key, PEM-encoded.
pub struct Pair {
    pub cert_pem: String,
    pub key_pem: String,
    cert_der: CertificateDer<'static>,
    key_der: Vec<u8>,
}

/// Every certificate of one fake cluster.
pub struct Pki {
    pub ca_pem: String,
    ca_der: CertificateDer<'static>,
    other_ca_pem: String,
    server: Pair,
    expired: Pair,
    wrong_name: Pair,
    client: Pair,
    stranger: Pair,
}

type Issuer = CertifiedIssuer<'static, KeyPair>;

fn ca(name: &str) -> Issuer {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages =
        vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    CertifiedIssuer::self_signed(params, KeyPair::generate().expect("a CA key")).expect("a self-signed CA")
}

fn leaf(issuer: &Issuer, names: &[&str], common_name: &str, client: bool, expired: bool) -> Pair {
    let mut params = CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
        .expect("leaf params");
    params.distinguished_name.push(DnType::CommonName, common_name);
    if client {
        // kubeadm's admin identity: CN is the user, O the group.
        params.distinguished_name.push(DnType::OrganizationName, "kubeadm:cluster-admins");
    }
    params.extended_key_usages =
        vec![if client { ExtendedKeyUsagePurpose::ClientAuth } else { ExtendedKeyUsagePurpose::ServerAuth }];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    if expired {
        params.not_before = rcgen::date_time_ymd(2019, 1, 1);
        params.not_after = rcgen::date_time_ymd(2020, 1, 1);
    }
    let key = KeyPair::generate().expect("a leaf key");
    let cert = params.signed_by(&key, issuer).expect("a signed leaf");
    Pair {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        cert_der: cert.der().clone(),
        key_der: key.serialize_der(),
    }
}

impl Pki {
    pub fn generate() -> Self {
        let cluster = ca("fakekube-ca");
        let other = ca("some-other-ca");
        Self {
            ca_pem: cluster.pem(),
            ca_der: cluster.der().clone(),
            other_ca_pem: other.pem(),
            server: leaf(&cluster, &["127.0.0.1"], "kube-apiserver", false, false),
            expired: leaf(&cluster, &["127.0.0.1"], "kube-apiserver", false, true),
            wrong_name: leaf(&cluster, &["kubernetes.invalid"], "kube-apiserver", false, false),
            client: leaf(&cluster, &[], "kubernetes-admin", true, false),
            stranger: leaf(&other, &[], "kubernetes-admin", true, false),
        }
    }

    /// The rustls server configuration presenting `cert`, requiring a client certificate signed
    /// by the cluster CA, or, with `tokens`, taking a client without one (who then authenticates
    /// with a bearer token) as an API server does.
    pub fn server_config(&self, cert: ServerCert, tokens: bool) -> Arc<ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca_der.clone()).expect("the cluster CA is a valid root");
        let builder = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
        let builder = if tokens { builder.allow_unauthenticated() } else { builder };
        let verifier = builder.build().expect("a client verifier");
        let pair = match cert {
            ServerCert::Valid => &self.server,
            ServerCert::Expired => &self.expired,
            ServerCert::WrongName => &self.wrong_name,
        };
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pair.key_der.clone()));
        let config = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![pair.cert_der.clone()], key)
            .expect("a server certificate and key");
        Arc::new(config)
    }

    fn ca_for(&self, trust: Trust) -> &str {
        match trust {
            Trust::ClusterCa => &self.ca_pem,
            Trust::OtherCa => &self.other_ca_pem,
        }
    }

    fn client_for(&self, client: ClientCert) -> &Pair {
        match client {
            ClientCert::Valid => &self.client,
            ClientCert::UnknownCa => &self.stranger,
        }
    }

    /// The `cluster:` and `user:` fields of a kubeconfig, as kind writes them: base64 of PEM.
    pub fn kubeconfig_data(&self, access: Access) -> KubeconfigData {
        let client = self.client_for(access.client);
        KubeconfigData {
            certificate_authority: STANDARD.encode(self.ca_for(access.trust)),
            client_certificate: STANDARD.encode(&client.cert_pem),
            client_key: STANDARD.encode(&client.key_pem),
        }
    }
}

/// Base64 of PEM, for `certificate-authority-data`, `client-certificate-data` and
/// `client-key-data`.
pub struct KubeconfigData {
    pub certificate_authority: String,
    pub client_certificate: String,
    pub client_key: String,
}
