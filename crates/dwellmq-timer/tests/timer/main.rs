//! The timing wheel against a plain model, and the manual clock. One test binary (one link)
//! with a module per feature.

mod manual_clock;
mod model;
