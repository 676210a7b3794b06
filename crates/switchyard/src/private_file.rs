//! Files Switchyard writes for itself that may hold secrets (published
//! keys, ACME accounts and certificates): readable by the owner only, and
//! replaced atomically, so a reader sees the old file or the new one.
//!
//! Each write goes through a temporary file of its own (the process, a
//! counter) before the rename: two writers of one file at once (a node's
//! etcd watch and an admin request both writing what was just published)
//! each rename a whole file. With one temporary name shared by both, the
//! second writer's rename found it already moved and failed with ENOENT
//! (a full test run: `cluster::certificates_published_as_files_reach_every_node`).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Writes `data` to `path` (its folder made if missing), mode 0600,
/// through a temporary file beside it and a rename. Errors name the file.
pub fn write(path: &Path, data: &[u8]) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let tmp = temporary(path);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(data).and_then(|_| f.sync_all()))
        .map_err(|e| format!("{}: {e}", tmp.display()))
        .and_then(|_| std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display())));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// `.NAME.PID.N.tmp` beside `path`: a dot first, so the cluster's file
/// sync and a folder listing pass it by.
fn temporary(path: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .map_or_else(|| "file".into(), |n| n.to_string_lossy().into_owned());
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    path.with_file_name(format!(".{name}.{}.{n}.tmp", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "switchyard-private-file-{tag}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn writes_owner_only_and_replaces() {
        let dir = scratch("replace");
        let path = dir.join("site.key");
        write(&path, b"one").expect("first write");
        write(&path, b"two").expect("second write");
        assert_eq!(std::fs::read(&path).expect("read"), b"two");
        let mode = std::fs::metadata(&path)
            .expect("metadata")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let left: Vec<_> = std::fs::read_dir(&dir).expect("dir").collect();
        assert_eq!(left.len(), 1, "a temporary file was left: {left:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Writers of one file at once all succeed, and the file is one of
    /// theirs whole (with a shared temporary name, renames failed).
    #[test]
    fn writers_of_one_file_at_once_all_succeed() {
        let dir = scratch("race");
        let path = dir.join("site.pem");
        let writers: Vec<_> = (0..8u8)
            .map(|w| {
                let path = path.clone();
                std::thread::spawn(move || {
                    for _ in 0..100 {
                        write(&path, &[w; 4096])?;
                    }
                    Ok::<(), String>(())
                })
            })
            .collect();
        for w in writers {
            w.join()
                .expect("writer thread")
                .expect("every write succeeds");
        }
        let body = std::fs::read(&path).expect("read");
        assert_eq!(body.len(), 4096);
        assert!(body.iter().all(|b| *b == body[0]), "a torn file");
        assert_eq!(std::fs::read_dir(&dir).expect("dir").count(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_folder_that_cannot_be_made_is_named() {
        let dir = scratch("blocked");
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("plain"), b"x").expect("file");
        let e = write(&dir.join("plain").join("k.pem"), b"k").expect_err("a file is in the way");
        assert!(e.contains("plain"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
