//! A vserver's offload settings: `[vserver.compression]` and
//! `[vserver.cache]` (and the shared `[cache]` store).

use std::sync::Arc;

use super::Ctx;
use crate::config::model;
use crate::config::snapshot::*;
use crate::config::types::is_token;

/// `[vserver.compression]`: every key checked against what the encoders
/// accept.
pub(super) fn build_compression(
    cx: &mut Ctx,
    c: &model::Compression,
    what: &str,
) -> crate::compress::Settings {
    use crate::compress::{Coding, Settings};
    let mut s = Settings::default();
    if let Some(list) = &c.algorithms {
        s.algorithms.clear();
        for a in list.get_ref() {
            match Coding::parse(a.get_ref()) {
                Some(coding) if !s.algorithms.contains(&coding) => s.algorithms.push(coding),
                Some(_) => cx.err(
                    a.span(),
                    format!(
                        "{what}: compression algorithm {:?} is listed twice",
                        a.get_ref()
                    ),
                ),
                None => cx.err(
                    a.span(),
                    format!(
                        "{what}: unknown compression algorithm {:?}; known: gzip, br, zstd",
                        a.get_ref()
                    ),
                ),
            }
        }
        if list.get_ref().is_empty() {
            cx.err(
                list.span(),
                format!("{what}: compression.algorithms is empty; remove the table or set enabled = false"),
            );
        }
    }
    let mut level = |v: &Option<toml::Spanned<u32>>, lo: u32, hi: u32, name: &str| -> Option<u32> {
        let v = v.as_ref()?;
        if (lo..=hi).contains(v.get_ref()) {
            Some(*v.get_ref())
        } else {
            cx.err(
                v.span(),
                format!(
                    "{what}: compression.{name} {} is out of range {lo} to {hi}",
                    v.get_ref()
                ),
            );
            None
        }
    };
    if let Some(l) = level(&c.gzip_level, 1, 9, "gzip_level") {
        s.gzip_level = l;
    }
    if let Some(l) = level(&c.brotli_level, 0, 11, "brotli_level") {
        s.brotli_level = l;
    }
    if let Some(z) = &c.zstd_level {
        if (-7..=19).contains(z.get_ref()) && *z.get_ref() != 0 {
            s.zstd_level = *z.get_ref();
        } else {
            cx.err(
                z.span(),
                format!(
                    "{what}: compression.zstd_level {} is out of range -7 to 19 (not 0)",
                    z.get_ref()
                ),
            );
        }
    }
    if let Some(types) = &c.types {
        s.types.clear();
        for t in types.get_ref() {
            let v = t.get_ref().trim().to_ascii_lowercase();
            let ok = match v.split_once('/') {
                Some((major, minor)) => {
                    !major.is_empty()
                        && major != "*"
                        && !minor.is_empty()
                        && (minor == "*" || !minor.contains('*'))
                        && !v.contains(';')
                }
                None => false,
            };
            if ok {
                s.types.push(v);
            } else {
                cx.err(
                    t.span(),
                    format!(
                        "{what}: compression type {:?} is not a media type (\"text/html\") or a range (\"text/*\")",
                        t.get_ref()
                    ),
                );
            }
        }
    }
    if let Some(n) = c.min_size {
        s.min_size = n;
    }
    s
}

const CACHE_MAX_BYTES: u64 = 256 << 20;
const CACHE_MAX_OBJECT: u64 = 8 << 20;

/// `[cache]`: the previous snapshot's store with the new limits, so a
/// reload keeps what is cached.
pub(super) fn cache_store(
    cx: &mut Ctx,
    c: Option<&model::CacheStore>,
    previous: Option<&Snapshot>,
) -> (Arc<crate::cache::Store>, (u64, u64)) {
    let mut max = CACHE_MAX_BYTES;
    let mut obj = CACHE_MAX_OBJECT;
    if let Some(c) = c {
        if let Some(m) = &c.max_bytes {
            max = *m.get_ref();
            if max < 1 << 20 {
                cx.err(
                    m.span(),
                    format!("cache.max_bytes {max} is below the minimum of 1 MiB (1048576)"),
                );
            }
        }
        if let Some(o) = &c.max_object_bytes {
            obj = *o.get_ref();
            if obj > max {
                cx.err(
                    o.span(),
                    format!("cache.max_object_bytes {obj} is larger than cache.max_bytes {max}"),
                );
            }
        }
    }
    // The new limits apply once the whole configuration is valid: a
    // failed reload must not shrink the running cache.
    let store = match previous {
        Some(p) => p.cache.clone(),
        None => Arc::new(crate::cache::Store::new(max, obj)),
    };
    (store, (max, obj))
}

/// `[vserver.cache]`.
pub(super) fn build_cache(
    cx: &mut Ctx,
    c: &model::VsCache,
    what: &str,
    name: &str,
) -> crate::cache::Settings {
    use crate::cache::{KeyPart, Settings};
    let mut s = Settings {
        name: format!("switchyard-{name}"),
        hit_status: format!("switchyard-{name}; hit"),
        ..Settings::default()
    };
    for k in c.key.iter().flatten() {
        let part = match k.get_ref().split_once(':') {
            Some(("header", n)) if is_token(n) => Some((KeyPart::Header, n.to_ascii_lowercase())),
            Some(("cookie", n)) if !n.is_empty() => Some((KeyPart::Cookie, n.to_string())),
            _ => None,
        };
        match part {
            Some(p) => s.key_extras.push(p),
            None => cx.err(
                k.span(),
                format!(
                    "{what}: cache key part {:?} is not \"header:NAME\" or \"cookie:NAME\"",
                    k.get_ref()
                ),
            ),
        }
    }
    s.store_set_cookie = c.store_set_cookie.unwrap_or(false);
    if let Some(h) = &c.heuristic_percent {
        if *h.get_ref() > 100 {
            cx.err(
                h.span(),
                format!(
                    "{what}: cache.heuristic_percent {} is over 100",
                    h.get_ref()
                ),
            );
        } else {
            s.heuristic_percent = *h.get_ref();
        }
    }
    s
}
