//! The few facts Switchyard needs from an X.509 certificate: its DNS names
//! (SAN, else the subject CN) for SNI, its validity period (to refuse an
//! expired certificate at load time), and its subject as an RFC 4514 string
//! (passed to members for client certificates).
//!
//! A small DER walker instead of a full X.509 crate: rustls-webpki (already
//! in the tree) verifies chains but does not expose validity dates or a
//! printable subject, and a general parser would add a dozen crates for
//! these three reads. Runs at config load and once per client-certificate
//! handshake, never per request. Input is untrusted (client certificates
//! are parsed after verification, but still): every read is bounds-checked
//! and a malformed certificate is an error, never a panic.

/// What was read from one certificate.
#[derive(Debug, Default, Clone)]
pub struct CertInfo {
    /// Seconds since the Unix epoch.
    pub not_before: i64,
    pub not_after: i64,
    /// RFC 4514 form, most specific first ("CN=client,O=Acme").
    pub subject: String,
    /// The subject's last common name, if any.
    pub common_name: Option<String>,
    /// dNSName entries of the subject alternative name extension.
    pub dns_names: Vec<String>,
    /// The issuer, RFC 4514 form.
    pub issuer: String,
    /// The serial number, lower-case hex (its DER bytes).
    pub serial_hex: String,
    /// iPAddress, rfc822Name and URI entries of the SAN extension.
    pub ip_addresses: Vec<String>,
    pub emails: Vec<String>,
    pub uris: Vec<String>,
    /// The DER SubjectPublicKeyInfo (with its SEQUENCE header).
    pub spki: Vec<u8>,
    /// The serial number's DER content octets.
    pub serial: Vec<u8>,
    /// The authority key identifier's keyIdentifier, if any (with the
    /// serial, the certificate's ACME renewal-information ID, RFC 9773).
    pub authority_key_id: Option<Vec<u8>>,
}

impl CertInfo {
    /// Names used for SNI: the SAN DNS names, or the CN when there is no
    /// SAN (as browsers no longer do, but as servers choosing a certificate
    /// still do), lower-cased.
    pub fn names(&self) -> Vec<String> {
        if !self.dns_names.is_empty() {
            return self
                .dns_names
                .iter()
                .map(|n| n.to_ascii_lowercase())
                .collect();
        }
        self.common_name
            .iter()
            .filter(|n| !n.is_empty() && !n.contains(' '))
            .map(|n| n.to_ascii_lowercase())
            .collect()
    }
}

struct Der<'a> {
    data: &'a [u8],
}

struct Tlv<'a> {
    tag: u8,
    /// Content only.
    value: &'a [u8],
    /// Tag, length and content.
    whole: &'a [u8],
}

impl<'a> Der<'a> {
    fn new(data: &'a [u8]) -> Self {
        Der { data }
    }

    fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    fn peek_tag(&self) -> Option<u8> {
        self.data.first().copied()
    }

    fn next(&mut self) -> Result<Tlv<'a>, &'static str> {
        const BAD: &str = "malformed DER";
        let d = self.data;
        let tag = *d.first().ok_or(BAD)?;
        if tag & 0x1f == 0x1f {
            return Err("unsupported DER tag");
        }
        let first = *d.get(1).ok_or(BAD)?;
        let (len, hdr) = if first < 0x80 {
            (first as usize, 2)
        } else {
            let n = (first & 0x7f) as usize;
            if n == 0 || n > 4 {
                return Err(BAD);
            }
            let mut len = 0usize;
            for i in 0..n {
                len = (len << 8) | *d.get(2 + i).ok_or(BAD)? as usize;
            }
            (len, 2 + n)
        };
        let end = hdr.checked_add(len).ok_or(BAD)?;
        if end > d.len() {
            return Err(BAD);
        }
        self.data = &d[end..];
        Ok(Tlv {
            tag,
            value: &d[hdr..end],
            whole: &d[..end],
        })
    }

    fn expect(&mut self, tag: u8) -> Result<Tlv<'a>, &'static str> {
        let t = self.next()?;
        if t.tag != tag {
            return Err("unexpected DER structure: not an X.509 certificate");
        }
        Ok(t)
    }
}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;
const OCTET_STRING: u8 = 0x04;
const OID_SAN: &[u8] = &[0x55, 0x1d, 0x11];
const OID_AKI: &[u8] = &[0x55, 0x1d, 0x23];
const OID_CN: &[u8] = &[0x55, 0x04, 0x03];

/// What the admin API shows of a stapled OCSP response (RFC 6960).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OcspInfo {
    /// "successful", "malformedRequest", ... (responseStatus).
    pub response_status: &'static str,
    /// "good", "revoked" or "unknown" for the first certificate answered.
    pub cert_status: Option<&'static str>,
    pub this_update: Option<i64>,
    pub next_update: Option<i64>,
}

/// Reads the status and validity of a DER OCSPResponse.
pub fn ocsp(der: &[u8]) -> Result<OcspInfo, &'static str> {
    let mut outer = Der::new(der);
    let resp = outer.expect(SEQUENCE)?;
    let mut r = Der::new(resp.value);
    let status = r.next()?;
    if status.tag != 0x0a || status.value.len() != 1 {
        return Err("malformed OCSP response status");
    }
    let response_status = match status.value[0] {
        0 => "successful",
        1 => "malformedRequest",
        2 => "internalError",
        3 => "tryLater",
        5 => "sigRequired",
        6 => "unauthorized",
        _ => "unknown",
    };
    let mut info = OcspInfo {
        response_status,
        cert_status: None,
        this_update: None,
        next_update: None,
    };
    if r.is_empty() {
        return Ok(info);
    }
    // responseBytes [0] EXPLICIT SEQUENCE { responseType, response OCTET STRING }
    let rb = r.next()?;
    let mut rb = Der::new(Der::new(rb.value).expect(SEQUENCE)?.value);
    rb.expect(OID)?;
    let basic = rb.expect(OCTET_STRING)?;
    let basic = Der::new(basic.value).expect(SEQUENCE)?;
    let mut b = Der::new(basic.value);
    let tbs = b.expect(SEQUENCE)?;
    let mut t = Der::new(tbs.value);
    if t.peek_tag() == Some(0xa0) {
        t.next()?; // version
    }
    t.next()?; // responderID
    t.next()?; // producedAt
    let responses = t.expect(SEQUENCE)?;
    let mut list = Der::new(responses.value);
    if list.is_empty() {
        return Ok(info);
    }
    let single = list.expect(SEQUENCE)?;
    let mut one = Der::new(single.value);
    one.expect(SEQUENCE)?; // certID
    let cs = one.next()?;
    info.cert_status = Some(match cs.tag & 0x1f {
        0 => "good",
        1 => "revoked",
        _ => "unknown",
    });
    info.this_update = Some(time(&one.next()?)?);
    if one.peek_tag() == Some(0xa0) {
        let nu = one.next()?;
        info.next_update = Some(time(&Der::new(nu.value).next()?)?);
    }
    Ok(info)
}

/// Parses a DER certificate.
pub fn parse(der: &[u8]) -> Result<CertInfo, &'static str> {
    let mut outer = Der::new(der);
    let cert = outer.expect(SEQUENCE)?;
    let mut c = Der::new(cert.value);
    let tbs = c.expect(SEQUENCE)?;
    let mut t = Der::new(tbs.value);
    if t.peek_tag() == Some(0xa0) {
        t.next()?; // version
    }
    let serial = t.next()?.value.to_vec();
    t.expect(SEQUENCE)?; // signature algorithm
    let issuer = t.expect(SEQUENCE)?;
    let validity = t.expect(SEQUENCE)?;
    let subject = t.expect(SEQUENCE)?;
    let spki = t.expect(SEQUENCE)?;
    let mut info = CertInfo {
        spki: spki.whole.to_vec(),
        serial,
        ..CertInfo::default()
    };
    let mut v = Der::new(validity.value);
    info.not_before = time(&v.next()?)?;
    info.not_after = time(&v.next()?)?;
    let (subject_s, cn) = name(subject.value)?;
    info.subject = subject_s;
    info.common_name = cn;
    info.issuer = name(issuer.value)?.0;
    info.serial_hex = info.serial.iter().map(|b| format!("{b:02x}")).collect();
    while !t.is_empty() {
        let f = t.next()?;
        if f.tag != 0xa3 {
            continue; // issuer / subject unique IDs
        }
        let mut exts = Der::new(Der::new(f.value).expect(SEQUENCE)?.value);
        while !exts.is_empty() {
            let ext = exts.expect(SEQUENCE)?;
            let mut e = Der::new(ext.value);
            let oid = e.expect(OID)?;
            if oid.value != OID_SAN && oid.value != OID_AKI {
                continue;
            }
            let mut val = e.next()?;
            if val.tag != OCTET_STRING {
                val = e.expect(OCTET_STRING)?; // after the critical flag
            }
            if oid.value == OID_AKI {
                // AuthorityKeyIdentifier ::= SEQUENCE { [0] keyIdentifier, ... }
                let mut aki = Der::new(Der::new(val.value).expect(SEQUENCE)?.value);
                while !aki.is_empty() {
                    let f = aki.next()?;
                    if f.tag == 0x80 {
                        info.authority_key_id = Some(f.value.to_vec());
                    }
                }
                continue;
            }
            let mut names = Der::new(Der::new(val.value).expect(SEQUENCE)?.value);
            while !names.is_empty() {
                let n = names.next()?;
                let text = || std::str::from_utf8(n.value).ok().map(str::to_string);
                match n.tag {
                    0x82 => info.dns_names.extend(text()),
                    0x81 => info.emails.extend(text()),
                    0x86 => info.uris.extend(text()),
                    0x87 => match n.value.len() {
                        4 => info.ip_addresses.push(
                            std::net::Ipv4Addr::from(
                                <[u8; 4]>::try_from(n.value).unwrap_or_default(),
                            )
                            .to_string(),
                        ),
                        16 => info.ip_addresses.push(
                            std::net::Ipv6Addr::from(
                                <[u8; 16]>::try_from(n.value).unwrap_or_default(),
                            )
                            .to_string(),
                        ),
                        _ => {}
                    },
                    _ => {}
                }
            }
        }
    }
    Ok(info)
}

fn digits(b: &[u8]) -> Result<i64, &'static str> {
    let mut n = 0i64;
    for c in b {
        if !c.is_ascii_digit() {
            return Err("malformed certificate time");
        }
        n = n * 10 + (c - b'0') as i64;
    }
    Ok(n)
}

/// UTCTime (YYMMDDHHMMSSZ) or GeneralizedTime (YYYYMMDDHHMMSSZ), as DER
/// requires them, to Unix seconds.
fn time(t: &Tlv) -> Result<i64, &'static str> {
    let v = t.value;
    let (year, rest) = match (t.tag, v.len()) {
        (0x17, 13) => {
            let yy = digits(&v[..2])?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &v[2..])
        }
        (0x18, 15) => (digits(&v[..4])?, &v[4..]),
        _ => return Err("malformed certificate time"),
    };
    if rest[10] != b'Z' {
        return Err("malformed certificate time");
    }
    let (mo, d) = (digits(&rest[0..2])?, digits(&rest[2..4])?);
    let (h, mi, s) = (
        digits(&rest[4..6])?,
        digits(&rest[6..8])?,
        digits(&rest[8..10])?,
    );
    Ok(days_from_civil(year, mo, d) * 86_400 + h * 3600 + mi * 60 + s)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn attr_name(oid: &[u8]) -> Option<&'static str> {
    Some(match oid {
        [0x55, 0x04, 0x03] => "CN",
        [0x55, 0x04, 0x06] => "C",
        [0x55, 0x04, 0x07] => "L",
        [0x55, 0x04, 0x08] => "ST",
        [0x55, 0x04, 0x09] => "STREET",
        [0x55, 0x04, 0x0a] => "O",
        [0x55, 0x04, 0x0b] => "OU",
        [0x55, 0x04, 0x05] => "serialNumber",
        [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x19] => "DC",
        [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x01] => "UID",
        [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x01] => "emailAddress",
        _ => return None,
    })
}

fn dotted(oid: &[u8]) -> String {
    let mut parts = Vec::new();
    let mut n: u64 = 0;
    for b in oid {
        n = (n << 7) | (b & 0x7f) as u64;
        if b & 0x80 == 0 {
            if parts.is_empty() {
                let first = (n / 40).min(2);
                parts.push(first);
                parts.push(n - first * 40);
            } else {
                parts.push(n);
            }
            n = 0;
        }
    }
    parts
        .iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join(".")
}

/// A directory string as text; None for types we do not decode.
fn string_value(t: &Tlv) -> Option<String> {
    match t.tag {
        // UTF8String, PrintableString, IA5String, NumericString, VisibleString
        0x0c | 0x13 | 0x16 | 0x12 | 0x1a => Some(String::from_utf8_lossy(t.value).into_owned()),
        // TeletexString: in practice Latin-1
        0x14 => Some(t.value.iter().map(|b| *b as char).collect()),
        // BMPString: UTF-16BE
        0x1e => {
            let units: Vec<u16> = t
                .value
                .chunks_exact(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]]))
                .collect();
            Some(String::from_utf16_lossy(&units))
        }
        _ => None,
    }
}

/// RFC 4514 escaping; control characters are hex-escaped too, so the result
/// is always a valid HTTP field value.
fn escape(v: &str, out: &mut String) {
    let n = v.chars().count();
    for (i, ch) in v.chars().enumerate() {
        let special = matches!(ch, ',' | '+' | '"' | '\\' | '<' | '>' | ';' | '=')
            || (i == 0 && (ch == '#' || ch == ' '))
            || (i + 1 == n && ch == ' ');
        if (ch as u32) < 0x20 || ch as u32 == 0x7f {
            out.push_str(&format!("\\{:02X}", ch as u32));
        } else {
            if special {
                out.push('\\');
            }
            out.push(ch);
        }
    }
}

/// A Name (the content of its SEQUENCE: the RDN SETs) as an RFC 4514
/// string (RDNs in reverse order), and its CN. Public for the fuzz target
/// (fuzz/fuzz_targets/x509_subject.rs), which reaches it without having to
/// build a whole certificate around it.
pub fn name(der: &[u8]) -> Result<(String, Option<String>), &'static str> {
    let mut rdns = Vec::new();
    let mut cn = None;
    let mut d = Der::new(der);
    while !d.is_empty() {
        let set = d.expect(SET)?;
        let mut s = Der::new(set.value);
        let mut parts = Vec::new();
        while !s.is_empty() {
            let atv = s.expect(SEQUENCE)?;
            let mut a = Der::new(atv.value);
            let oid = a.expect(OID)?;
            let val = a.next()?;
            let mut part = String::new();
            match (attr_name(oid.value), string_value(&val)) {
                (Some(n), Some(v)) => {
                    part.push_str(n);
                    part.push('=');
                    escape(&v, &mut part);
                }
                (n, _) => {
                    part.push_str(&n.map(str::to_string).unwrap_or_else(|| dotted(oid.value)));
                    part.push_str("=#");
                    for b in val.whole {
                        part.push_str(&format!("{b:02x}"));
                    }
                }
            }
            if oid.value == OID_CN {
                cn = string_value(&val);
            }
            parts.push(part);
        }
        rdns.push(parts.join("+"));
    }
    rdns.reverse();
    Ok((rdns.join(","), cn))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_days() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(2038, 1, 19), 24_855);
    }

    #[test]
    fn times() {
        let t = |tag, s: &[u8]| {
            time(&Tlv {
                tag,
                value: s,
                whole: s,
            })
        };
        assert_eq!(t(0x17, b"700101000000Z"), Ok(0));
        assert_eq!(t(0x18, b"20380119031407Z"), Ok(2_147_483_647));
        assert!(t(0x17, b"7001010000Z").is_err());
        assert!(t(0x17, b"70010100000aZ").is_err());
    }

    #[test]
    fn oids() {
        assert_eq!(
            dotted(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d]),
            "1.2.840.113549"
        );
        assert_eq!(dotted(&[0x55, 0x04, 0x03]), "2.5.4.3");
    }

    #[test]
    fn escaping() {
        let mut s = String::new();
        escape(" a,b+c\r\n ", &mut s);
        assert_eq!(s, "\\ a\\,b\\+c\\0D\\0A\\ ");
    }

    #[test]
    fn malformed_input_is_an_error() {
        assert!(parse(&[]).is_err());
        assert!(parse(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]).is_err());
        assert!(parse(&[0x30, 0x03, 0x30, 0x01]).is_err());
        assert!(parse(&[0x1f, 0x00]).is_err());
    }
}
