//! The one way these tests run the `bulkhead` binary: from the repository
//! root (the examples' paths), stdin given or closed, exit code and both
//! outputs returned.

use std::{
    io::Write,
    process::{Command, Stdio},
};

/// Runs `bulkhead ARGS` with `stdin` (None: closed); (exit code, stdout, stderr).
pub(crate) fn run(args: &[&str], stdin: Option<&[u8]>) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_bulkhead"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("bulkhead runs");
    if let Some(bytes) = stdin {
        let mut pipe = child.stdin.take().expect("stdin");
        // The binary may refuse before reading everything: a broken pipe is fine.
        let _ = pipe.write_all(bytes);
    }
    let out = child.wait_with_output().expect("bulkhead exits");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
