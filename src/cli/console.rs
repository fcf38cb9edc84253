//! The binary's own output: the URL lines on stdout, its complaints and its log on stderr.
//!
//! None of it may stop the broker. A harness that reads the first URL line and closes the pipe,
//! a supervisor that closes stdout, a log collector that goes away: each makes writes fail
//! (EPIPE; Rust ignores SIGPIPE, so it is an error, not a signal). `println!` and `eprintln!`
//! panic on such an error, and tracing-subscriber reports a failed write with `eprintln!`;
//! everything here drops the error instead, and the broker carries on without that output.

use std::io::Write;

/// Writes `lines` on stdout and flushes them (a reader waits for a line, not for a buffer to
/// fill). The error, if stdout is closed or broken, is the caller's to report, not a panic.
pub(crate) fn print_lines(lines: &[String]) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    for line in lines {
        writeln!(stdout, "{line}")?;
    }
    stdout.flush()
}

/// Prints clap's answer (help and the version on stdout, a usage error on stderr) as clap
/// would, without its trailing blanks, and returns the exit code for it (0 or 2). A reader
/// that goes away (`dwellmq --help | head`) is no error.
pub(crate) fn answer(clap_said: &clap::Error) -> u8 {
    let text = super::help::tidy(&clap_said.render().to_string());
    let _ = if clap_said.use_stderr() {
        std::io::stderr().lock().write_all(text.as_bytes())
    } else {
        std::io::stdout().lock().write_all(text.as_bytes())
    };
    u8::try_from(clap_said.exit_code()).unwrap_or(2)
}

/// Writes `dwellmq: {message}` on stderr. A closed or broken stderr is ignored.
pub(crate) fn complain(message: impl std::fmt::Display) {
    let _ = writeln!(std::io::stderr().lock(), "dwellmq: {message}");
}

/// The log's writer: stderr, with its errors dropped. With
/// `log_internal_errors(false)` on the subscriber, a broken log pipe loses log lines and
/// nothing else.
pub(crate) fn log_writer() -> LossyWriter<std::io::Stderr> {
    LossyWriter(std::io::stderr())
}

/// A writer that reports every write as done, whether or not it was.
pub(crate) struct LossyWriter<W>(W);

impl<W: Write> Write for LossyWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self.0.write(buf) {
            // A partial write is reported as such, so that `write_all` goes on with the rest;
            // an interrupted one is retried by it.
            Ok(written) => Ok(written),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Err(e),
            Err(_) => Ok(buf.len()),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = self.0.flush();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Broken;

    impl Write for Broken {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
    }

    #[test]
    fn a_broken_writer_is_no_error() {
        let mut writer = LossyWriter(Broken);
        assert!(writer.write_all(b"a log line\n").is_ok());
        assert!(writer.flush().is_ok());
    }
}
