//! HTTP dates (RFC 9110 5.6.7): IMF-fixdate written, all three formats
//! read. Seconds since the Unix epoch.

const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Days since 1970-01-01 of a civil date (proleptic Gregorian).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// "Sun, 06 Nov 1994 08:49:37 GMT".
pub fn format(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = crate::clock::civil_from_days(days);
    format!(
        "{}, {:02} {} {:04} {:02}:{:02}:{:02} GMT",
        DAYS[days.rem_euclid(7) as usize],
        d,
        MONTHS[(m - 1) as usize],
        y,
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Any of the three formats, strictly (a date a cache misreads could make
/// a response fresh that is not); month, day and zone names in any case.
/// None when it is none of them.
pub fn parse(v: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(v).ok()?;
    imf_fixdate(s).or_else(|| rfc850(s)).or_else(|| asctime(s))
}

fn month(m: &str) -> Option<u32> {
    MONTHS
        .iter()
        .position(|x| x.eq_ignore_ascii_case(m))
        .map(|i| i as u32 + 1)
}

fn num(s: &str, digits: usize) -> Option<i64> {
    (s.len() == digits && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok())?
}

/// "08:49:37" as seconds of the day.
fn clock(t: &str) -> Option<i64> {
    let (h, rest) = t.split_once(':')?;
    let (m, s) = rest.split_once(':')?;
    let (h, m, s) = (num(h, 2)?, num(m, 2)?, num(s, 2)?);
    (h <= 23 && m <= 59 && s <= 60).then_some(h * 3600 + m * 60 + s)
}

fn at(y: i64, m: u32, d: i64, secs: i64) -> Option<i64> {
    (1..=31)
        .contains(&d)
        .then(|| days_from_civil(y, m, d as u32) * 86_400 + secs)
}

/// "Sun, 06 Nov 1994 08:49:37 GMT"
fn imf_fixdate(s: &str) -> Option<i64> {
    let p: Vec<&str> = s.split(' ').collect();
    let [day, d, mon, y, t, gmt] = p.as_slice() else {
        return None;
    };
    let day = day.strip_suffix(',')?;
    if day.len() != 3
        || !DAYS.iter().any(|x| x.eq_ignore_ascii_case(day))
        || !gmt.eq_ignore_ascii_case("GMT")
    {
        return None;
    }
    at(num(y, 4)?, month(mon)?, num(d, 2)?, clock(t)?)
}

/// "Sunday, 06-Nov-94 08:49:37 GMT"
fn rfc850(s: &str) -> Option<i64> {
    let p: Vec<&str> = s.split(' ').collect();
    let [day, dmy, t, gmt] = p.as_slice() else {
        return None;
    };
    day.strip_suffix(',')?;
    if !gmt.eq_ignore_ascii_case("GMT") {
        return None;
    }
    let mut it = dmy.split('-');
    let (d, mon, yy) = (num(it.next()?, 2)?, month(it.next()?)?, num(it.next()?, 2)?);
    if it.next().is_some() {
        return None;
    }
    // Two-digit years: 70-99 are the 1900s (RFC 9110 5.6.7 asks for "more
    // than 50 years in the future" to be the past; this is that for now).
    let y = if yy < 70 { 2000 + yy } else { 1900 + yy };
    at(y, mon, d, clock(t)?)
}

/// "Sun Nov  6 08:49:37 1994"
fn asctime(s: &str) -> Option<i64> {
    if s.len() != 24 {
        return None;
    }
    let (day, mon, d, t, y) = (&s[0..3], &s[4..7], &s[8..10], &s[11..19], &s[20..24]);
    if &s[3..4] != " " || &s[7..8] != " " || &s[10..11] != " " || &s[19..20] != " " {
        return None;
    }
    if !DAYS.iter().any(|x| x.eq_ignore_ascii_case(day)) {
        return None;
    }
    let d = d.trim_start();
    let d = if d.len() == 1 { num(d, 1)? } else { num(d, 2)? };
    at(num(y, 4)?, month(mon)?, d, clock(t)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_formats() {
        let t = 784_111_777;
        assert_eq!(parse(b"Sun, 06 Nov 1994 08:49:37 GMT"), Some(t));
        assert_eq!(parse(b"Sunday, 06-Nov-94 08:49:37 GMT"), Some(t));
        assert_eq!(parse(b"Sun Nov  6 08:49:37 1994"), Some(t));
        assert_eq!(format(t), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(parse(format(1_795_000_000).as_bytes()), Some(1_795_000_000));
        for bad in [
            &b""[..],
            b"0",
            b"-1",
            b"yesterday",
            b"Sun, 06 Nov 1994 25:49:37 GMT",
            b"Sun, 06 Foo 1994 08:49:37 GMT",
        ] {
            assert_eq!(parse(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }
}
