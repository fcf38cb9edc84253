//! The Prometheus text format (version 0.0.4): every family once, with its `# HELP` and
//! `# TYPE` lines before its samples.

use std::fmt::{Display, Write};

/// A family's type, as the `# TYPE` line names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Counter,
    Gauge,
    Histogram,
    /// RabbitMQ's info families (`rabbitmq_identity_info`, `rabbitmq_build_info`).
    Untyped,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
            Kind::Untyped => "untyped",
        }
    }
}

/// The exposition being written.
#[derive(Default)]
pub(crate) struct Exposition {
    out: String,
}

impl Exposition {
    /// Starts family `name`: its header now, its samples through the returned writer.
    pub(crate) fn family(&mut self, name: &str, kind: Kind, help: &str) -> Family<'_> {
        let _ = writeln!(
            self.out,
            "# HELP {name} {}\n# TYPE {name} {}",
            escape_help(help),
            kind.name()
        );
        Family {
            out: &mut self.out,
            name: name.to_string(),
        }
    }

    pub(crate) fn finish(self) -> String {
        self.out
    }
}

/// One family's samples.
pub(crate) struct Family<'a> {
    out: &'a mut String,
    name: String,
}

impl Family<'_> {
    /// A sample of the family itself.
    pub(crate) fn sample(&mut self, labels: &[(&str, &str)], value: impl Display) -> &mut Self {
        write_sample(self.out, &self.name, "", labels, value);
        self
    }

    /// A histogram's buckets (`bounds` with the cumulative count at or below each, then
    /// `+Inf`), `_sum` and `_count`.
    pub(crate) fn histogram(
        &mut self,
        labels: &[(&str, &str)],
        bounds: &[(String, u64)],
        count: u64,
        sum: impl Display,
    ) {
        for (le, cumulative) in bounds {
            let mut with_le = labels.to_vec();
            with_le.push(("le", le));
            write_sample(self.out, &self.name, "_bucket", &with_le, cumulative);
        }
        let mut with_le = labels.to_vec();
        with_le.push(("le", "+Inf"));
        write_sample(self.out, &self.name, "_bucket", &with_le, count);
        write_sample(self.out, &self.name, "_sum", labels, sum);
        write_sample(self.out, &self.name, "_count", labels, count);
    }
}

fn write_sample(
    out: &mut String,
    name: &str,
    suffix: &str,
    labels: &[(&str, &str)],
    value: impl Display,
) {
    out.push_str(name);
    out.push_str(suffix);
    if !labels.is_empty() {
        out.push('{');
        for (i, (k, v)) in labels.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "{k}=\"{}\"", escape(v));
        }
        out.push('}');
    }
    let _ = writeln!(out, " {value}");
}

/// A label value as the text format wants it: backslash, quote and newline escaped.
pub(crate) fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// HELP text escapes backslash and newline.
fn escape_help(help: &str) -> String {
    help.replace('\\', "\\\\").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        let mut out = Exposition::default();
        out.family("m", Kind::Gauge, "help")
            .sample(&[("q", "x\"y")], 3);
        assert_eq!(
            out.finish(),
            "# HELP m help\n# TYPE m gauge\nm{q=\"x\\\"y\"} 3\n"
        );
    }

    #[test]
    fn a_histogram_has_cumulative_buckets_inf_sum_and_count() {
        let mut out = Exposition::default();
        out.family("h", Kind::Histogram, "sizes").histogram(
            &[("p", "a")],
            &[("1".into(), 1), ("10".into(), 3)],
            4,
            25,
        );
        assert_eq!(
            out.finish(),
            "# HELP h sizes\n# TYPE h histogram\n\
             h_bucket{p=\"a\",le=\"1\"} 1\nh_bucket{p=\"a\",le=\"10\"} 3\n\
             h_bucket{p=\"a\",le=\"+Inf\"} 4\nh_sum{p=\"a\"} 25\nh_count{p=\"a\"} 4\n"
        );
    }
}
