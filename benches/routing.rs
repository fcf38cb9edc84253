//! Routing cost per message as bindings grow: the topic trie must not degrade with many
//! bindings (a linear matcher would grow 10,000× from the smallest to the largest case).
//!
//! `cargo bench --bench routing`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use dwellmq_core::routing::{Binding, BindingSet, Destination, RoutingKind};

fn topic_set(bindings: usize) -> BindingSet {
    let mut set = BindingSet::new(RoutingKind::Topic);
    for i in 0..bindings {
        // Patterns like "region-7.orders.*" and "region-7.#": a realistic mix of `*` and `#`.
        let pattern = if i % 2 == 0 {
            format!("region-{i}.orders.*")
        } else {
            format!("region-{i}.#")
        };
        set.add(Binding::new(
            "x",
            Destination::Queue(format!("q{i}").into()),
            pattern,
        ));
    }
    set
}

fn direct_set(bindings: usize) -> BindingSet {
    let mut set = BindingSet::new(RoutingKind::Direct);
    for i in 0..bindings {
        set.add(Binding::new(
            "x",
            Destination::Queue(format!("q{i}").into()),
            format!("key-{i}"),
        ));
    }
    set
}

fn routing(c: &mut Criterion) {
    let mut group = c.benchmark_group("route");
    group.throughput(Throughput::Elements(1));
    let mut out = Vec::new();
    for bindings in [10usize, 1_000, 100_000] {
        let topic = topic_set(bindings);
        let key = format!("region-{}.orders.created", bindings / 2);
        group.bench_with_input(BenchmarkId::new("topic", bindings), &key, |b, key| {
            b.iter(|| {
                out.clear();
                topic.route(std::hint::black_box(key), None, &mut out);
                std::hint::black_box(out.len())
            })
        });
        let direct = direct_set(bindings);
        let key = format!("key-{}", bindings / 2);
        group.bench_with_input(BenchmarkId::new("direct", bindings), &key, |b, key| {
            b.iter(|| {
                out.clear();
                direct.route(std::hint::black_box(key), None, &mut out);
                std::hint::black_box(out.len())
            })
        });
    }
    group.finish();
}

criterion_group!(benches, routing);
criterion_main!(benches);
