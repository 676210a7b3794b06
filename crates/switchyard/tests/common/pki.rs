//! Test certificates: a CA in a temp dir that issues leaf certificates,
//! made with the openssl command (scripts/test.sh installs it). Shared by
//! tests/tls.rs (termination) and tests/upstream_tls.rs (re-encryption).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::temp_dir;

/// Runs `openssl ARGS` in `dir`; panics with its stderr when it fails.
pub fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl (apt-get install openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The key type of an issued certificate.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Kind {
    /// RSA 2048.
    Rsa,
    /// ECDSA P-256.
    Ecdsa,
}

/// Writes a new private key of `kind` to `dir/key`.
pub fn new_key(dir: &Path, key: &str, kind: Kind) {
    let alg: &[&str] = match kind {
        Kind::Rsa => &["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"],
        Kind::Ecdsa => &[
            "-algorithm",
            "EC",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ],
    };
    let mut args = vec!["genpkey"];
    args.extend_from_slice(alg);
    args.extend_from_slice(&["-out", key]);
    openssl(dir, &args);
}

/// A test CA (ECDSA P-256, CN = its name, 30 days) in a temp dir that
/// issues leaf certificates into the same dir.
pub struct Pki {
    pub dir: PathBuf,
    pub name: String,
}

impl Pki {
    pub fn new(name: &str) -> Pki {
        let dir = temp_dir("pki");
        openssl(
            &dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.pem"),
                "-days",
                "30",
                "-subj",
                &format!("/CN={name}"),
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        );
        Pki {
            dir,
            name: name.to_string(),
        }
    }

    /// The CA certificate (PEM).
    pub fn ca(&self) -> PathBuf {
        self.dir.join(format!("{}.pem", self.name))
    }

    /// Issues `file.pem` / `file.key`: `subject` as openssl writes it
    /// ("/O=Acme/CN=alice"), subject alternative names as openssl writes
    /// them ("IP:127.0.0.1,DNS:api.internal"; empty: none), for servers and
    /// clients, valid for `days` (-1: expired yesterday).
    pub fn leaf(
        &self,
        file: &str,
        subject: &str,
        sans: &str,
        kind: Kind,
        days: i32,
    ) -> (PathBuf, PathBuf) {
        let key = format!("{file}.key");
        new_key(&self.dir, &key, kind);
        openssl(
            &self.dir,
            &[
                "req",
                "-new",
                "-key",
                &key,
                "-out",
                &format!("{file}.csr"),
                "-subj",
                subject,
            ],
        );
        let mut ext =
            String::from("basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth,clientAuth\n");
        if !sans.is_empty() {
            ext.push_str(&format!("subjectAltName={sans}\n"));
        }
        std::fs::write(self.dir.join(format!("{file}.ext")), ext).expect("ext");
        openssl(
            &self.dir,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{file}.csr"),
                "-CA",
                &format!("{}.pem", self.name),
                "-CAkey",
                &format!("{}.key", self.name),
                "-CAcreateserial",
                "-days",
                &days.to_string(),
                "-extfile",
                &format!("{file}.ext"),
                "-out",
                &format!("{file}.pem"),
            ],
        );
        (self.dir.join(format!("{file}.pem")), self.dir.join(key))
    }

    /// A server certificate for DNS names `dns` (empty: none): `leaf` with
    /// `DNS:` names.
    pub fn issue(
        &self,
        file: &str,
        subject: &str,
        dns: &[&str],
        kind: Kind,
        days: i32,
    ) -> (PathBuf, PathBuf) {
        let sans: Vec<String> = dns.iter().map(|n| format!("DNS:{n}")).collect();
        self.leaf(file, subject, &sans.join(","), kind, days)
    }

    /// An ECDSA certificate for CN `cn` with `sans` (as in `leaf`), 30 days.
    pub fn issue_cn(&self, file: &str, cn: &str, sans: &str) -> (PathBuf, PathBuf) {
        self.leaf(file, &format!("/CN={cn}"), sans, Kind::Ecdsa, 30)
    }

    /// The usual upstream member certificate: IP 127.0.0.1 and DNS api.internal.
    pub fn member(&self, file: &str) -> (PathBuf, PathBuf) {
        self.issue_cn(file, "api.internal", "IP:127.0.0.1,DNS:api.internal")
    }

    /// A self-signed certificate (no CA) in this PKI's directory, for
    /// api.internal and 127.0.0.1.
    pub fn self_signed(&self, file: &str) -> (PathBuf, PathBuf) {
        openssl(
            &self.dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                &format!("{file}.key"),
                "-out",
                &format!("{file}.pem"),
                "-days",
                "30",
                "-subj",
                "/CN=api.internal",
                "-addext",
                "subjectAltName=IP:127.0.0.1,DNS:api.internal",
            ],
        );
        (
            self.dir.join(format!("{file}.pem")),
            self.dir.join(format!("{file}.key")),
        )
    }
}
