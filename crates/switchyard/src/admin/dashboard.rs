//! The dashboard's files, embedded in the binary (no CDN: an admin network
//! is often cut off from the internet). Plain HTML, CSS and JavaScript with
//! no build step; the page reads `/api/v1/live` and the event stream
//! `/api/v1/events`, and changes members with `PATCH
//! /api/v1/pools/{pool}/members/{member}` (docs/dashboard.md).

const FILES: &[(&str, &str, &[u8])] = &[
    (
        "index.html",
        "text/html; charset=utf-8",
        include_bytes!("dashboard/index.html"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_bytes!("dashboard/app.js"),
    ),
    (
        "style.css",
        "text/css; charset=utf-8",
        include_bytes!("dashboard/style.css"),
    ),
];

/// The content type and bytes of a dashboard file.
pub fn asset(name: &str) -> Option<(&'static str, &'static [u8])> {
    FILES
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, ctype, bytes)| (*ctype, *bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_the_page_names_is_served() {
        let (ctype, html) = asset("index.html").expect("index.html");
        assert!(ctype.starts_with("text/html"));
        let html = std::str::from_utf8(html).expect("utf-8");
        for f in ["app.js", "style.css"] {
            assert!(html.contains(&format!("\"{f}\"")), "index.html names {f}");
            assert!(asset(f).is_some(), "{f} is served");
        }
        assert!(asset("../Cargo.toml").is_none());
        assert!(asset("").is_none());
    }

    /// Nothing is fetched from outside the admin listener: no absolute URL
    /// in any file (an admin network is often cut off from the internet).
    #[test]
    fn no_external_urls() {
        for (name, _, bytes) in FILES {
            let text = std::str::from_utf8(bytes).expect("utf-8");
            for bad in ["http://", "https://", "//cdn", "@import"] {
                assert!(!text.contains(bad), "{name} contains {bad:?}");
            }
        }
    }
}
