//! Accept-Encoding (RFC 9110 12.5.3): the coding a client gets.
//!
//! A coding is acceptable when the client lists it (or `*`) with a q-value
//! above zero. Among acceptable codings the highest q wins, and the
//! server's order breaks ties. A client that accepts none of ours gets
//! identity: compression is never a reason to refuse a request, even when
//! the client wrote `identity;q=0`.

use super::Coding;

/// The coding to send, or None for identity. A request without
/// Accept-Encoding gets identity (RFC 9110 allows any coding then, but
/// clients that omit the field are often ones that cannot decode).
pub fn choose<'a>(
    accept_encoding: impl Iterator<Item = &'a [u8]>,
    offered: &[Coding],
) -> Option<Coding> {
    // q in thousandths; None: not listed.
    let mut q = [None::<u16>; 3];
    let mut star = None::<u16>;
    for (token, weight) in weighted(accept_encoding) {
        let slot = if token == b"*" {
            &mut star
        } else if let Some(c) = coding_of(token) {
            &mut q[c.index()]
        } else {
            continue;
        };
        // Listed twice: the most favourable reading.
        *slot = Some(slot.map_or(weight, |w| w.max(weight)));
    }
    let mut best: Option<(Coding, u16)> = None;
    for &c in offered {
        let w = q[c.index()].or(star).unwrap_or(0);
        if w > 0 && best.is_none_or(|(_, bw)| w > bw) {
            best = Some((c, w));
        }
    }
    best.map(|(c, _)| c)
}

/// Whether Accept-Encoding accepts `coding` (any token, e.g. a stored
/// response's Content-Encoding): listed, or covered by `*`, with q > 0.
pub fn accepts<'a>(accept_encoding: impl Iterator<Item = &'a [u8]>, coding: &[u8]) -> bool {
    let (mut listed, mut star) = (None::<u16>, None::<u16>);
    let same = |t: &[u8]| {
        t.eq_ignore_ascii_case(coding)
            || (coding.eq_ignore_ascii_case(b"gzip") && t.eq_ignore_ascii_case(b"x-gzip"))
    };
    for (token, weight) in weighted(accept_encoding) {
        let slot = if token == b"*" {
            &mut star
        } else if same(token) {
            &mut listed
        } else {
            continue;
        };
        *slot = Some(slot.map_or(weight, |w| w.max(weight)));
    }
    listed.or(star).unwrap_or(0) > 0
}

fn coding_of(token: &[u8]) -> Option<Coding> {
    if token.eq_ignore_ascii_case(b"x-gzip") {
        return Some(Coding::Gzip);
    }
    Coding::ALL
        .into_iter()
        .find(|c| token.eq_ignore_ascii_case(c.token().as_bytes()))
}

/// Every (coding, q in thousandths) the fields list.
fn weighted<'a>(fields: impl Iterator<Item = &'a [u8]>) -> impl Iterator<Item = (&'a [u8], u16)> {
    fields
        .flat_map(|f| f.split(|b| *b == b','))
        .filter_map(|item| {
            let mut parts = item.split(|b| *b == b';');
            let token = parts.next().unwrap_or_default().trim_ascii();
            (!token.is_empty()).then(|| (token, parts.find_map(qvalue).unwrap_or(1000)))
        })
}

/// "q=0.5" as thousandths; None when this parameter is not a q-value.
/// A malformed q-value counts as 0 (not acceptable): never guess upwards.
fn qvalue(param: &[u8]) -> Option<u16> {
    let param = param.trim_ascii();
    let v = param
        .strip_prefix(b"q=")
        .or_else(|| param.strip_prefix(b"Q="))?
        .trim_ascii();
    let parse = || -> Option<u16> {
        let (int, frac) = match v.iter().position(|b| *b == b'.') {
            Some(i) => (&v[..i], &v[i + 1..]),
            None => (v, &b""[..]),
        };
        if int.len() != 1 || frac.len() > 3 || !frac.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let mut n = match int[0] {
            b'0' => 0u16,
            b'1' => 1000,
            _ => return None,
        };
        let mut scale = 100;
        for d in frac {
            n += u16::from(d - b'0') * scale;
            scale /= 10;
        }
        (n <= 1000).then_some(n)
    };
    Some(parse().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use Coding::*;

    fn pick(ae: &str, offered: &[Coding]) -> Option<Coding> {
        choose(std::iter::once(ae.as_bytes()), offered)
    }

    #[test]
    fn negotiation() {
        let all = [Zstd, Br, Gzip];
        assert_eq!(choose(std::iter::empty(), &all), None);
        assert_eq!(pick("", &all), None);
        assert_eq!(pick("gzip", &all), Some(Gzip));
        assert_eq!(pick("x-gzip", &all), Some(Gzip));
        assert_eq!(pick("gzip, deflate, br", &all), Some(Br));
        assert_eq!(pick("gzip, deflate, br, zstd", &all), Some(Zstd));
        assert_eq!(pick("gzip, deflate, br, zstd", &[Gzip, Br]), Some(Gzip));
        assert_eq!(pick("gzip;q=1.0, br;q=0.5", &all), Some(Gzip));
        assert_eq!(pick("gzip;q=0, br;q=0.001", &all), Some(Br));
        assert_eq!(pick("gzip;q=0", &all), None);
        assert_eq!(pick("*", &all), Some(Zstd));
        assert_eq!(pick("*;q=0.5, gzip", &all), Some(Gzip));
        assert_eq!(pick("*;q=0, gzip;q=0.2", &all), Some(Gzip));
        assert_eq!(pick("*;q=0", &all), None);
        assert_eq!(pick("identity;q=0", &all), None);
        assert_eq!(pick("deflate, compress", &all), None);
        assert_eq!(pick("GZIP ; Q=0.8 , br;q=0.7", &all), Some(Gzip));
        // Malformed q-values never make a coding acceptable.
        assert_eq!(pick("gzip;q=2", &all), None);
        assert_eq!(pick("gzip;q=abc", &all), None);
        assert_eq!(pick("gzip;q=0.0001", &all), None);
        assert_eq!(pick("gzip;q=1.000", &all), Some(Gzip));
        // Split over two fields.
        let two = [&b"br;q=0.1"[..], &b"gzip"[..]];
        assert_eq!(choose(two.into_iter(), &all), Some(Gzip));
        let acc = |ae: &str, c: &str| accepts(std::iter::once(ae.as_bytes()), c.as_bytes());
        assert!(acc("gzip, br", "br") && acc("x-gzip", "gzip") && acc("*", "deflate"));
        assert!(!acc("br;q=0", "br") && !acc("*;q=0", "br") && !acc("gzip", "br"));
        assert!(!acc("*, br;q=0", "br") && acc("br;q=0, *", "gzip"));
    }
}
