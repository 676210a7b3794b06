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

fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// "Sun, 06 Nov 1994 08:49:37 GMT".
pub fn format(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
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

/// Any of the three formats; None when it is none of them.
pub fn parse(v: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(v).ok()?.trim();
    let (_, rest) = s.split_once(' ')?;
    let parts: Vec<&str> = rest.split_ascii_whitespace().collect();
    let (d, mon, y, time) = match parts.as_slice() {
        // IMF-fixdate: "06 Nov 1994 08:49:37 GMT"
        [d, mon, y, t, "GMT"] => (d.parse().ok()?, *mon, y.parse::<i64>().ok()?, *t),
        // RFC 850: "Sunday, 06-Nov-94 08:49:37 GMT"
        [dmy, t, "GMT"] => {
            let mut it = dmy.split('-');
            let d = it.next()?.parse().ok()?;
            let mon = it.next()?;
            let yy: i64 = it.next()?.parse().ok()?;
            // Two-digit years more than 50 years ahead are in the past.
            let y = if yy < 70 { 2000 + yy } else { 1900 + yy };
            (d, mon, y, *t)
        }
        // asctime: "Nov  6 08:49:37 1994" (after the day name)
        [mon, d, t, y] => (d.parse().ok()?, *mon, y.parse().ok()?, *t),
        _ => return None,
    };
    let m = MONTHS.iter().position(|x| *x == mon)? as u32 + 1;
    let mut hms = time.split(':').map(|x| x.parse::<i64>().ok());
    let (h, mi, se) = (hms.next()??, hms.next()??, hms.next()??);
    if !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    Some(days_from_civil(y, m, d) * 86_400 + h * 3600 + mi * 60 + se)
}

pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
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
