//! Who may use the admin API (read with the configuration): bearer tokens from the operator's tokens file,
//! each with a name (written in the log next to every change it makes) and
//! a role. `read` sees everything; `admin` may also change things.
//!
//! The file is read with the configuration, so a reload rotates tokens. A
//! token is compared in constant time: the comparison must not tell an
//! attacker how much of a guess was right.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    Read,
    Admin,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Admin => "admin",
        }
    }
}

/// The caller of one request, once authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub name: String,
    pub role: Role,
}

impl fmt::Display for Caller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name, self.role.as_str())
    }
}

struct Entry {
    name: String,
    role: Role,
    token: Vec<u8>,
}

pub struct Tokens {
    entries: Vec<Entry>,
}

/// Shorter tokens are guessable; 16 characters of a random alphabet are not.
const MIN_TOKEN_LEN: usize = 16;

impl Tokens {
    /// Lines of `<name> <role> <token>`; blank lines and `#` comments are
    /// skipped. Errors name the line (1-based).
    pub fn parse(text: &str) -> Result<Tokens, (usize, String)> {
        let mut entries: Vec<Entry> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let n = i + 1;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut parts = line.split_whitespace();
            let (Some(name), Some(role), Some(token), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                return Err((n, "expected `<name> <role> <token>`".into()));
            };
            let role = match role {
                "read" => Role::Read,
                "admin" => Role::Admin,
                other => {
                    return Err((
                        n,
                        format!("unknown role {other:?}; roles are \"read\" and \"admin\""),
                    ))
                }
            };
            if token.len() < MIN_TOKEN_LEN {
                return Err((
                    n,
                    format!("the token of {name:?} is shorter than {MIN_TOKEN_LEN} characters"),
                ));
            }
            if entries.iter().any(|e| e.token == token.as_bytes()) {
                return Err((n, format!("the token of {name:?} is listed twice")));
            }
            entries.push(Entry {
                name: name.to_string(),
                role,
                token: token.as_bytes().to_vec(),
            });
        }
        if entries.is_empty() {
            return Err((0, "no token in the file".into()));
        }
        Ok(Tokens { entries })
    }

    /// The holder of `token`, if any. Every entry is compared, whole, so
    /// the time taken does not depend on where a guess went wrong.
    pub fn check(&self, token: &[u8]) -> Option<Caller> {
        let mut found = None;
        for e in &self.entries {
            if constant_time_eq(&e.token, token) {
                found = Some(Caller {
                    name: e.name.clone(),
                    role: e.role,
                });
            }
        }
        found
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The token of an `Authorization: Bearer <token>` value.
pub fn bearer(value: &[u8]) -> Option<&[u8]> {
    let v = value.trim_ascii();
    if v.len() > 7 && v[..7].eq_ignore_ascii_case(b"bearer ") {
        Some(v[7..].trim_ascii())
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_roles_and_tokens() {
        let t = Tokens::parse(
            "# ops\nalice admin 0123456789abcdef0123\n\nbob read fedcba9876543210fedc\n",
        )
        .unwrap();
        assert_eq!(
            t.check(b"0123456789abcdef0123"),
            Some(Caller {
                name: "alice".into(),
                role: Role::Admin
            })
        );
        assert_eq!(t.check(b"fedcba9876543210fedc").unwrap().role, Role::Read);
        assert_eq!(t.check(b"0123456789abcdef012"), None);
        assert_eq!(t.check(b""), None);
    }

    #[test]
    fn refuses_bad_lines_with_their_number() {
        assert_eq!(
            Tokens::parse("a admin 0123456789abcdef\nb root 0123456789abcdefg")
                .err()
                .unwrap()
                .0,
            2
        );
        assert!(Tokens::parse("a admin short")
            .err()
            .unwrap()
            .1
            .contains("shorter"));
        assert!(Tokens::parse("a admin").is_err());
        assert!(Tokens::parse("a admin 0123456789abcdef x").is_err());
        assert!(Tokens::parse("# nothing\n").is_err());
        assert!(
            Tokens::parse("a admin 0123456789abcdef\nb read 0123456789abcdef")
                .err()
                .unwrap()
                .1
                .contains("twice")
        );
    }

    #[test]
    fn bearer_values() {
        assert_eq!(bearer(b"Bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer(b"bearer  abc "), Some(&b"abc"[..]));
        assert_eq!(bearer(b"Basic abc"), None);
        assert_eq!(bearer(b"Bearer"), None);
    }
}
