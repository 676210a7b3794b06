//! The certificate parser must never panic, whatever the DER: it reads
//! client certificates, whose subject goes to members in a header. The
//! subject it gives must be a valid HTTP field value.
#![no_main]
use libfuzzer_sys::fuzz_target;
use switchyard::tls::x509;

fn check_subject(s: &str) {
    assert!(
        s.bytes().all(|b| b >= 0x20 && b != 0x7f),
        "control character in subject {s:?}"
    );
}

fuzz_target!(|data: &[u8]| {
    // A whole certificate, as a handshake hands it over.
    if let Ok(info) = x509::parse(data) {
        check_subject(&info.subject);
        let _ = info.names();
    }
    // The subject Name alone, so that the fuzzer reaches it directly.
    if let Ok((subject, _cn)) = x509::name(data) {
        check_subject(&subject);
    }
});
