//! The WAF's request body processors (multipart, JSON, XML, urlencoded)
//! on arbitrary bodies, through the engine as a request meets it: no
//! panic, and what they collect stays bounded by the engine's limits.
#![no_main]
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use switchyard_waf::engine::{Engine, Request, Settings};
use switchyard_waf::seclang::Loader;

/// Rules reading every variable the processors fill, so each is built.
const RULES: &str = r#"
SecRuleEngine On
SecRequestBodyAccess On
SecRule REQUEST_HEADERS:Content-Type "^application/json" "id:1,phase:1,pass,nolog,ctl:requestBodyProcessor=JSON"
SecRule REQUEST_HEADERS:Content-Type "^text/xml" "id:2,phase:1,pass,nolog,ctl:requestBodyProcessor=XML"
SecRule ARGS|ARGS_NAMES|FILES|FILES_NAMES|FILES_SIZES|MULTIPART_PART_HEADERS "@rx (?i)evil" "id:10,phase:2,pass,log,msg:'%{MATCHED_VAR_NAME}'"
SecRule XML:/* "@contains evil" "id:11,phase:2,pass,log"
SecRule REQBODY_ERROR|MULTIPART_STRICT_ERROR|MULTIPART_UNMATCHED_BOUNDARY "!@eq 0" "id:12,phase:2,pass,log"
SecRule &ARGS "@gt 1000" "id:13,phase:2,pass,log,msg:'too many args kept'"
"#;

fn engine() -> &'static Engine {
    static E: OnceLock<Engine> = OnceLock::new();
    E.get_or_init(|| {
        let mut l = Loader::sandboxed();
        l.load_str(RULES, "fuzz.conf", None).expect("rules");
        Engine::new(l.finish().expect("ruleset"), Settings::default()).expect("engine")
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    // A multipart boundary from the input's first bytes, so the fuzzer
    // can find bodies that use it.
    let (boundary, body) = rest.split_at(rest.len().min(12));
    let boundary: String = boundary.iter().map(|&b| (b'a' + b % 26) as char).collect();
    let ctype = match pick % 4 {
        0 => format!("multipart/form-data; boundary={boundary}"),
        1 => "application/json".to_string(),
        2 => "text/xml".to_string(),
        _ => "application/x-www-form-urlencoded".to_string(),
    };
    let len = body.len().to_string();
    let headers: [(&[u8], &[u8]); 3] = [
        (b"Host", b"fuzz"),
        (b"Content-Type", ctype.as_bytes()),
        (b"Content-Length", len.as_bytes()),
    ];
    let mut tx = engine().transaction(Request {
        method: "POST",
        uri: b"/upload?a=1",
        uri_raw: b"/upload?a=1",
        protocol: "HTTP/1.1",
        headers: &headers,
        remote_addr: "127.0.0.1",
        remote_port: 1,
        local_addr: "127.0.0.1",
        local_port: 80,
        unique_id: "fuzz",
    });
    tx.process_request_headers();
    tx.process_request_body(body, None);
    tx.process_logging();
    let args = tx.values("ARGS").len();
    assert!(args <= 1000 + 1, "{args} arguments kept");
});
