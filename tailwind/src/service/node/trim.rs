//! Trimming: dropping a log's oldest segments at every member.
//!
//! `trim(before)` asks each of the log's members to remove the committed
//! segments that end at or before record `before`. A member first raises its
//! **floor** (the trim point, kept in the file `log<n>-trim` of its directory,
//! written whole and renamed into place), then removes the segments' files, so a
//! restart never finds a segment below the floor (it removes any). Its answer to
//! a new primary's state request carries the floor; the primary takes the highest
//! floor of the members, forgets the segments below it (so it never re-seeds a
//! trimmed segment back), and trims the members that missed the trim.

use super::*;

/// The file that keeps a member's trim floor.
fn floor_path(dir: &Path, log: u64) -> PathBuf {
    dir.join(format!("log{log}-trim"))
}

/// The floor kept in `dir` for log `log` (0 if none was written).
pub(in crate::service) fn read_floor(dir: &Path, log: u64) -> Result<u64, String> {
    let path = floor_path(dir, log);
    match std::fs::read(&path) {
        Ok(b) if b.len() == 8 => Ok(u64::from_le_bytes(b.try_into().expect("8 bytes"))),
        Ok(b) => Err(format!("{}: {} bytes, not 8", path.display(), b.len())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

fn write_floor(dir: &Path, log: u64, floor: u64) -> std::io::Result<()> {
    let path = floor_path(dir, log);
    let tmp = path.with_extension("part");
    {
        let mut f = crate::format::create_private(&tmp)?;
        std::io::Write::write_all(&mut f, &floor.to_le_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, &path)?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

impl Shared {
    /// Raises this member's floor to `before` and removes the committed segments
    /// that end at or before it; returns how many were removed.
    pub fn trim_here(&self, before: u64) -> Result<usize, String> {
        // Segments still on their way to the disk are trimmed once there.
        self.pool.wait_flushed(self.cfg.request_timeout);
        let mut st = lock(&self.st);
        if before <= st.trimmed {
            return Ok(0);
        }
        write_floor(&self.cfg.dir, self.cfg.log, before).map_err(|e| format!("the trim floor: {e}"))?;
        st.trimmed = before;
        let gone: Vec<u64> = st.segments.iter().filter(|(b, c)| *b + *c <= before).map(|(b, _)| *b).collect();
        for base in &gone {
            st.segments.remove(base);
            let path = self.path(*base);
            if let Err(e) = std::fs::remove_file(&path) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(node = %self.me, path = %path.display(), %e, "could not remove a trimmed segment");
                }
            }
        }
        Ok(gone.len())
    }
}
