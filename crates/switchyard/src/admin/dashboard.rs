//! The dashboard's files, embedded in the binary (no CDN: an admin network
//! is often cut off from the internet).

/// The content type and bytes of a dashboard file.
pub fn asset(name: &str) -> Option<(&'static str, &'static [u8])> {
    match name {
        "index.html" => Some((
            "text/html; charset=utf-8",
            include_bytes!("dashboard/index.html"),
        )),
        _ => None,
    }
}
