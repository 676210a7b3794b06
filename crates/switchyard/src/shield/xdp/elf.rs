//! Just enough of ELF64 to load shield.bpf.o: the program's section with
//! its subprograms (`.text`: BPF-to-BPF calls and bpf_loop callbacks)
//! appended, its map definitions (libbpf's old `maps` section, which needs
//! no BTF), the relocations that point map loads at them, and the license.

use std::collections::BTreeMap;

/// `struct map_def` of shield.bpf.c.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapDef {
    pub kind: u32,
    pub key: u32,
    pub value: u32,
    pub entries: u32,
    pub flags: u32,
}

#[derive(Debug)]
pub struct Object {
    /// The program's instructions, subprogram references resolved, map
    /// references not yet.
    pub insns: Vec<u8>,
    pub maps: BTreeMap<String, MapDef>,
    /// (byte offset of an `ld_imm64` in `insns`, the map it loads).
    pub relocs: Vec<(usize, String)>,
    /// (byte offset of a call, the kernel function it calls): resolved
    /// against the kernel's BTF by the loader.
    pub kfuncs: Vec<(usize, String)>,
    pub license: String,
}

struct Section {
    name: String,
    kind: u32,
    offset: usize,
    size: usize,
    link: u32,
    info: u32,
}

fn u16_at(b: &[u8], at: usize) -> Result<u16, String> {
    b.get(at..at + 2)
        .map(|s| u16::from_le_bytes([s[0], s[1]]))
        .ok_or_else(|| format!("ELF truncated at {at}"))
}
fn u32_at(b: &[u8], at: usize) -> Result<u32, String> {
    b.get(at..at + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or_else(|| format!("ELF truncated at {at}"))
}
fn u64_at(b: &[u8], at: usize) -> Result<u64, String> {
    let lo = u32_at(b, at)? as u64;
    let hi = u32_at(b, at + 4)? as u64;
    Ok(lo | hi << 32)
}
fn cstr(b: &[u8], at: usize) -> Result<String, String> {
    let rest = b
        .get(at..)
        .ok_or_else(|| format!("string at {at} outside the ELF"))?;
    let end = rest.iter().position(|c| *c == 0).unwrap_or(rest.len());
    Ok(String::from_utf8_lossy(&rest[..end]).into_owned())
}

/// Parses `b`, taking the program from section `prog`.
pub fn parse(b: &[u8], prog: &str) -> Result<Object, String> {
    if b.get(..4) != Some(b"\x7fELF") || b.get(4) != Some(&2) || b.get(5) != Some(&1) {
        return Err("not a little-endian ELF64 object".into());
    }
    let shoff = u64_at(b, 0x28)? as usize;
    let shentsize = u16_at(b, 0x3a)? as usize;
    let shnum = u16_at(b, 0x3c)? as usize;
    let shstrndx = u16_at(b, 0x3e)? as usize;
    let raw = |i: usize| -> Result<(u32, u32, usize, usize, u32, u32), String> {
        let h = shoff + i * shentsize;
        Ok((
            u32_at(b, h)?,
            u32_at(b, h + 4)?,
            u64_at(b, h + 0x18)? as usize,
            u64_at(b, h + 0x20)? as usize,
            u32_at(b, h + 0x28)?,
            u32_at(b, h + 0x2c)?,
        ))
    };
    let (_, _, stroff, _, _, _) = raw(shstrndx)?;
    let mut secs = Vec::new();
    for i in 0..shnum {
        let (name, kind, offset, size, link, info) = raw(i)?;
        secs.push(Section {
            name: cstr(b, stroff + name as usize)?,
            kind,
            offset,
            size,
            link,
            info,
        });
    }
    let data = |s: &Section| {
        b.get(s.offset..s.offset + s.size)
            .ok_or_else(|| format!("section {} outside the ELF", s.name))
    };
    let find = |n: &str| secs.iter().position(|s| s.name == n);
    let prog_i = find(prog).ok_or_else(|| format!("no section {prog:?}"))?;
    let maps_i = find("maps");
    let text_i = find(".text");
    let mut insns = data(&secs[prog_i])?.to_vec();
    let text_base = insns.len();
    if let Some(t) = text_i {
        insns.extend_from_slice(data(&secs[t])?);
    }
    let license = match find("license") {
        Some(i) => cstr(data(&secs[i])?, 0)?,
        None => "GPL".into(),
    };
    // SHT_SYMTAB = 2: each symbol 24 bytes (name, info, other, shndx, value, size).
    let symtab_i = secs
        .iter()
        .position(|s| s.kind == 2)
        .ok_or("no symbol table")?;
    let symtab = data(&secs[symtab_i])?;
    let strtab = data(
        secs.get(secs[symtab_i].link as usize)
            .ok_or("symbol table without strings")?,
    )?;
    let mut syms = Vec::new();
    for at in (0..symtab.len()).step_by(24) {
        let name = cstr(strtab, u32_at(symtab, at)? as usize)?;
        let shndx = u16_at(symtab, at + 6)? as usize;
        let value = u64_at(symtab, at + 8)? as usize;
        syms.push((name, shndx, value));
    }
    let mut maps = BTreeMap::new();
    let mut map_at = BTreeMap::new();
    if let Some(mi) = maps_i {
        let md = data(&secs[mi])?;
        for (name, shndx, value) in &syms {
            let value = *value;
            if *shndx != mi || name.is_empty() {
                continue;
            }
            let def = MapDef {
                kind: u32_at(md, value)?,
                key: u32_at(md, value + 4)?,
                value: u32_at(md, value + 8)?,
                entries: u32_at(md, value + 12)?,
                flags: u32_at(md, value + 16)?,
            };
            maps.insert(name.clone(), def);
            map_at.insert(value, name.clone());
        }
    }
    // SHT_REL = 9 applying to the program or .text: 16 bytes each
    // (offset, info = symbol << 32 | type).
    let mut relocs = Vec::new();
    let mut kfuncs = Vec::new();
    for s in secs
        .iter()
        .filter(|s| s.kind == 9 && (s.info as usize == prog_i || Some(s.info as usize) == text_i))
    {
        let base = if s.info as usize == prog_i {
            0
        } else {
            text_base
        };
        let r = data(s)?;
        for at in (0..r.len()).step_by(16) {
            let off = base + u64_at(r, at)? as usize;
            let info = u64_at(r, at + 8)?;
            let (sym, kind) = ((info >> 32) as usize, info as u32);
            let (name, shndx, value) = syms.get(sym).ok_or_else(|| {
                format!("relocation at {off} names symbol {sym}, which does not exist")
            })?;
            let insn = insns
                .get(off..off + 8)
                .ok_or_else(|| format!("relocation at {off} outside the program"))?;
            let (opcode, imm) = (
                insn[0],
                i32::from_le_bytes([insn[4], insn[5], insn[6], insn[7]]),
            );
            let here = (off / 8) as i64;
            if Some(*shndx) == text_i {
                // A subprogram: a call (R_BPF_64_32, imm in instructions
                // after the symbol, less one) or a function pointer for
                // bpf_loop (R_BPF_64_64 on ld_imm64, imm in bytes).
                let target = match (kind, opcode) {
                    (10, 0x85) => (text_base + value) as i64 / 8 + imm as i64 + 1,
                    (1, 0x18) => (text_base + value) as i64 / 8 + imm as i64 / 8,
                    _ => {
                        return Err(format!(
                            "unsupported relocation at {off}: type {kind}, opcode {opcode:#x} against {name:?}"
                        ))
                    }
                };
                let rel = i32::try_from(target - here - 1)
                    .map_err(|_| format!("call at {off} out of range"))?;
                insns[off + 4..off + 8].copy_from_slice(&rel.to_le_bytes());
                if opcode == 0x18 {
                    // src_reg = BPF_PSEUDO_FUNC (4).
                    insns[off + 1] = (insns[off + 1] & 0x0f) | 0x40;
                }
                continue;
            }
            // An undefined symbol called: a kernel function (__ksym).
            if *shndx == 0 && kind == 10 && opcode == 0x85 {
                kfuncs.push((off, name.clone()));
                continue;
            }
            // R_BPF_64_64 (1): an ld_imm64 of a map.
            if kind != 1 || Some(*shndx) != maps_i || opcode != 0x18 {
                return Err(format!(
                    "unsupported relocation at {off}: type {kind} against {name:?} (only map loads and subprograms are)"
                ));
            }
            let map = map_at
                .get(value)
                .ok_or_else(|| format!("relocation at {off} points inside no map"))?;
            if off + 16 > insns.len() {
                return Err(format!("relocation at {off} outside the program"));
            }
            relocs.push((off, map.clone()));
        }
    }
    Ok(Object {
        insns,
        maps,
        relocs,
        kfuncs,
        license,
    })
}
