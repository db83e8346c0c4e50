//! Directories a test works in, removed when it ends, passed or not.

use std::path::PathBuf;

/// `n` directories under the temp directory, `{name}-0` to `{name}-{n-1}` (old
/// ones of those names are removed first; they are created by whoever writes
/// into them), removed with what they hold when this is dropped. Indexes as a
/// slice of paths.
#[derive(Debug)]
pub struct TempDirs(Vec<PathBuf>);

impl TempDirs {
    /// See the type's docs.
    pub fn new(name: &str, n: usize) -> TempDirs {
        let dirs: Vec<PathBuf> = (0..n).map(|i| std::env::temp_dir().join(format!("{name}-{i}"))).collect();
        for d in &dirs {
            let _ = std::fs::remove_dir_all(d);
        }
        TempDirs(dirs)
    }
}

impl std::ops::Deref for TempDirs {
    type Target = [PathBuf];

    fn deref(&self) -> &[PathBuf] {
        &self.0
    }
}

impl Drop for TempDirs {
    fn drop(&mut self) {
        for d in &self.0 {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}
