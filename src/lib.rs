//! dwellmq
