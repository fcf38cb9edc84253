//! Format 4 → 5: the stream tables (`streams`, `stream_index`, `stream_log`), created empty.
//! Format 4 had no streams, so there is nothing to convert: a format-4 store opens with every
//! record as it was, and its queues can be declared as streams from then on.

use redb::WriteTransaction;

use super::{table_exists, StepResult};
use crate::layout::{STREAMS, STREAM_INDEX, STREAM_LOG};

/// Creates the stream tables a format-4 store lacks; returns how many it created.
pub(crate) fn to_format5(tx: &WriteTransaction) -> StepResult<u64> {
    let mut created = 0;
    for table in [STREAMS, STREAM_INDEX, STREAM_LOG] {
        if !table_exists(tx, table)? {
            tx.open_table(table)?;
            created += 1;
        }
    }
    Ok(created)
}
