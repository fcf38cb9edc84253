//! Format 3 to 4: a format-3 `held_due` entry (one key per hold, value the `u32` due offset)
//! becomes a format-4 record of one entry: the key stays (its last field, the hold's seq, is
//! the record's first seq) and the value becomes `u32 0 ‖ u32 offset`. The writer reads and
//! edits records of one entry like any other; it only writes fuller ones.

use redb::{ReadableTable, TableDefinition, WriteTransaction};

use super::{StepError, StepResult};
use crate::layout::{Bin, HELD_DUE};

/// Where the rewritten entries go before they replace the table (same transaction).
const HELD_DUE_UPGRADING: Bin = TableDefinition::new("held_due.upgrading");

/// Rewrites every `held_due` entry; returns how many.
pub(crate) fn to_format4(tx: &WriteTransaction) -> StepResult<u64> {
    let mut rewritten = 0;
    {
        let old = tx.open_table(HELD_DUE)?;
        let mut new = tx.open_table(HELD_DUE_UPGRADING)?;
        for entry in old.iter()? {
            let (key, value) = entry?;
            let offset: [u8; 4] = value
                .value()
                .try_into()
                .map_err(|_| StepError::Corrupt("held_due", key.value().to_vec()))?;
            let mut record = [0u8; 8];
            record[4..].copy_from_slice(&offset);
            new.insert(key.value(), &record[..])?;
            rewritten += 1;
        }
    }
    tx.delete_table(HELD_DUE)?;
    tx.rename_table(HELD_DUE_UPGRADING, HELD_DUE)?;
    Ok(rewritten)
}
