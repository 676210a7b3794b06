//! A small command-line parser: `--name value`, `--name=value`, boolean flags.
//!
//! Hand-written to keep the dependency tree small; every command declares its
//! boolean flags so that `--quick --runs 3` is not ambiguous.

use std::time::Duration;

pub struct Args {
    items: Vec<(String, Option<String>)>,
    used: Vec<bool>,
    pub positional: Vec<String>,
}

impl Args {
    pub fn parse(args: &[String], bool_flags: &[&str]) -> Result<Args, String> {
        let mut items = Vec::new();
        let mut positional = Vec::new();
        let mut i = 0;
        while i < args.len() {
            let a = &args[i];
            if let Some(name) = a.strip_prefix("--") {
                if let Some((n, v)) = name.split_once('=') {
                    items.push((n.to_string(), Some(v.to_string())));
                } else if bool_flags.contains(&name) {
                    items.push((name.to_string(), None));
                } else {
                    let v = args
                        .get(i + 1)
                        .ok_or_else(|| format!("--{name} needs a value"))?;
                    items.push((name.to_string(), Some(v.clone())));
                    i += 1;
                }
            } else {
                positional.push(a.clone());
            }
            i += 1;
        }
        let used = vec![false; items.len()];
        Ok(Args {
            items,
            used,
            positional,
        })
    }

    pub fn flag(&mut self, name: &str) -> bool {
        let mut found = false;
        for (i, (n, v)) in self.items.iter().enumerate() {
            if n == name {
                self.used[i] = true;
                found = !matches!(v.as_deref(), Some("false") | Some("0"));
            }
        }
        found
    }

    pub fn get(&mut self, name: &str) -> Option<String> {
        self.get_all(name).pop()
    }

    pub fn get_all(&mut self, name: &str) -> Vec<String> {
        let mut out = Vec::new();
        for (i, (n, v)) in self.items.iter().enumerate() {
            if n == name {
                self.used[i] = true;
                if let Some(v) = v {
                    out.push(v.clone());
                }
            }
        }
        out
    }

    /// All values of a repeatable, comma-separable option.
    pub fn list(&mut self, name: &str) -> Vec<String> {
        self.get_all(name)
            .iter()
            .flat_map(|v| v.split(','))
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    }

    pub fn num<T: std::str::FromStr>(&mut self, name: &str) -> Result<Option<T>, String> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => v
                .parse::<T>()
                .map(Some)
                .map_err(|_| format!("--{name}: not a number: {v}")),
        }
    }

    pub fn duration(&mut self, name: &str) -> Result<Option<Duration>, String> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => parse_duration(&v)
                .map(Some)
                .ok_or_else(|| format!("--{name}: not a duration: {v} (try 10s, 500ms, 2m)")),
        }
    }

    pub fn size(&mut self, name: &str) -> Result<Option<u64>, String> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => parse_size(&v)
                .map(Some)
                .ok_or_else(|| format!("--{name}: not a size: {v} (try 128, 8k, 1m)")),
        }
    }

    /// Fails on options nobody asked for, so a typo is not silently ignored.
    pub fn finish(&self) -> Result<(), String> {
        for (i, (n, _)) in self.items.iter().enumerate() {
            if !self.used[i] {
                return Err(format!("unknown option --{n}"));
            }
        }
        Ok(())
    }
}

pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let (num, mult) = if let Some(n) = s.strip_suffix("ms") {
        (n, 0.001)
    } else if let Some(n) = s.strip_suffix("us") {
        (n, 0.000_001)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = s.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (s, 1.0)
    };
    let v: f64 = num.trim().parse().ok()?;
    let secs = v * mult;
    // Over 100 days is a typo, and would overflow Instant arithmetic.
    if secs.is_nan() || !(0.0..=1e7).contains(&secs) {
        return None;
    }
    Duration::try_from_secs_f64(secs).ok()
}

/// Sizes as the reports write them: "128", "1k", "64KB", "0.2k", "1m" (binary units).
pub fn parse_size(s: &str) -> Option<u64> {
    let l = s.trim().to_ascii_lowercase();
    let l = l.strip_suffix('b').unwrap_or(&l);
    let (num, mult) = if let Some(n) = l.strip_suffix('k') {
        (n, 1024.0)
    } else if let Some(n) = l.strip_suffix('m') {
        (n, 1024.0 * 1024.0)
    } else if let Some(n) = l.strip_suffix('g') {
        (n, 1024.0 * 1024.0 * 1024.0)
    } else {
        (l, 1.0)
    };
    let v: f64 = num.parse().ok()?;
    if v.is_nan() || v < 0.0 || !v.is_finite() {
        return None;
    }
    Some((v * mult).round() as u64)
}

pub fn fmt_size(n: u64) -> String {
    if n >= 1 << 20 && n.trailing_zeros() >= 20 {
        format!("{}MB", n / (1024 * 1024))
    } else if n >= 1 << 10 && n.trailing_zeros() >= 10 {
        format!("{}KB", n / 1024)
    } else {
        format!("{n}B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn sizes_and_durations() {
        assert_eq!(parse_size("128"), Some(128));
        assert_eq!(parse_size("64KB"), Some(65536));
        assert_eq!(parse_size("0.2k"), Some(205));
        assert_eq!(parse_size("1m"), Some(1048576));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("x"), None);
        let mut a = Args::parse(
            &[
                "--quick".into(),
                "--runs".into(),
                "3".into(),
                "--x=1".into(),
            ],
            &["quick"],
        )
        .unwrap();
        assert!(a.flag("quick"));
        assert_eq!(a.num::<u32>("runs").unwrap(), Some(3));
        assert!(a.finish().is_err());
    }
}
