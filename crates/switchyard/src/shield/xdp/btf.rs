//! The one thing the loader needs from the kernel's BTF
//! (/sys/kernel/btf/vmlinux): the type id of a kernel function a program
//! calls (a kfunc, e.g. bpf_sk_assign_tcp_reqsk).

fn u32_at(b: &[u8], at: usize) -> Result<u32, String> {
    b.get(at..at + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or_else(|| format!("BTF truncated at {at}"))
}

/// The BTF id of function `name` in `btf` (the raw vmlinux BTF).
pub fn func_id(btf: &[u8], name: &str) -> Result<u32, String> {
    if btf.get(..2) != Some(&[0x9f, 0xeb]) {
        return Err("not little-endian BTF".into());
    }
    let hdr_len = u32_at(btf, 4)? as usize;
    let type_off = u32_at(btf, 8)? as usize;
    let type_len = u32_at(btf, 12)? as usize;
    let str_off = u32_at(btf, 16)? as usize;
    let types = btf
        .get(hdr_len + type_off..hdr_len + type_off + type_len)
        .ok_or("BTF types outside the file")?;
    let strings = btf
        .get(hdr_len + str_off..)
        .ok_or("BTF strings outside the file")?;
    let mut at = 0;
    let mut id = 1u32;
    while at + 12 <= types.len() {
        let name_off = u32_at(types, at)? as usize;
        let info = u32_at(types, at + 4)?;
        let (kind, vlen) = ((info >> 24) & 0x1f, (info & 0xffff) as usize);
        // FUNC = 12.
        if kind == 12 {
            let n = strings.get(name_off..).unwrap_or_default();
            if n.starts_with(name.as_bytes()) && n.get(name.len()) == Some(&0) {
                return Ok(id);
            }
        }
        // What follows each kind's 12-byte header.
        at += 12
            + match kind {
                1 | 14 | 17 => 4,   // INT, VAR, DECL_TAG
                3 => 12,            // ARRAY
                4 | 5 => 12 * vlen, // STRUCT, UNION
                6 => 8 * vlen,      // ENUM
                13 => 8 * vlen,     // FUNC_PROTO
                15 => 12 * vlen,    // DATASEC
                19 => 12 * vlen,    // ENUM64
                _ => 0,             // PTR, FWD, TYPEDEF, qualifiers, FUNC, FLOAT, TYPE_TAG
            };
        id += 1;
    }
    Err(format!("the kernel has no function {name} (BTF)"))
}
