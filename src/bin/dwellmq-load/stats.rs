//! Measurements: broker CPU from /proc, latency percentiles.

/// User + system CPU seconds consumed so far by process `pid` (Linux `/proc/PID/stat`).
pub(crate) fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // USER_HZ is 100 on every Linux this runs on.
    Some((utime + stime) / 100.0)
}

/// p50, p99, p99.9 and max of `samples` (sorted in place), in the samples' unit.
pub(crate) fn percentiles(samples: &mut [f64]) -> Option<(f64, f64, f64, f64)> {
    if samples.is_empty() {
        return None;
    }
    samples.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    Some((at(0.50), at(0.99), at(0.999), samples[samples.len() - 1]))
}

/// "p50 … ms, p99 … ms, p99.9 … ms, max … ms" for millisecond `samples` (sorted in place).
pub(crate) fn summary_ms(samples: &mut [f64]) -> Option<String> {
    let (p50, p99, p999, max) = percentiles(samples)?;
    Some(format!(
        "p50 {p50:.2} ms, p99 {p99:.2} ms, p99.9 {p999:.2} ms, max {max:.2} ms"
    ))
}

/// Counts content body frames in `buf` and drops every complete frame; calls `on_body` with
/// each body's payload.
pub(crate) fn drain_frames(buf: &mut bytes::BytesMut, mut on_body: impl FnMut(&[u8])) -> usize {
    use bytes::Buf;
    let mut bodies = 0;
    loop {
        if buf.len() < 7 {
            return bodies;
        }
        let size = u32::from_be_bytes([buf[3], buf[4], buf[5], buf[6]]) as usize;
        if buf.len() < size + 8 {
            return bodies;
        }
        if buf[0] == 3 {
            bodies += 1;
            on_body(&buf[7..7 + size]);
        }
        buf.advance(size + 8);
    }
}
